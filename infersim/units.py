"""Named unit constants and boundary converters.

Everything inside infersim is SI (seconds, bytes, FLOP, FLOP/s, B/s). Non-SI units appear only in
YAML field names and report columns (``hbm_bandwidth_tb_s``, ``ttft_ms``), and are converted here.
"""

from __future__ import annotations

KILO = 1e3
MEGA = 1e6
GIGA = 1e9
TERA = 1e12
PETA = 1e15
KIB = 2**10
MIB = 2**20
GIB = 2**30

MS = 1e-3
"""One millisecond in seconds."""
US = 1e-6
"""One microsecond in seconds."""
HOUR = 3600.0
"""One hour in seconds."""

BYTES_PER_ELEMENT: dict[str, float] = {
    "fp32": 4.0,
    "tf32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    # fp6/fp4 carry block scales: NVFP4 stores one fp8 scale per 16 elements (4 + 8/16 bits),
    # MXFP4 one e8m0 scale per 32; the NVFP4 figure is used as the (slightly larger) default.
    "fp6": 0.75 + 1.0 / 16,
    "fp4": 0.5 + 1.0 / 16,
}
"""Storage bytes per element for each precision, block scales included (NVIDIA NVFP4 format)."""

PACKED_BYTES_PER_ELEMENT: dict[str, float] = {**BYTES_PER_ELEMENT, "fp6": 0.75, "fp4": 0.5}
"""Operand bytes per element as a GEMM's tiles hold them (block scales travel separately)."""

PRECISIONS: tuple[str, ...] = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp6", "fp4")
"""Precisions known to infersim, widest first."""


def tflops_to_flop_rate(tflops: float) -> float:
    """TFLOP/s (datasheet) -> FLOP/s."""
    return tflops * TERA


def tb_s_to_bandwidth(tb_s: float) -> float:
    """TB/s (decimal) -> B/s."""
    return tb_s * TERA


def gb_s_to_bandwidth(gb_s: float) -> float:
    """GB/s (decimal) -> B/s."""
    return gb_s * GIGA


def gbit_s_to_bandwidth(gbit_s: float) -> float:
    """Gbit/s (decimal) -> B/s."""
    return gbit_s * GIGA / 8.0
