"""Hardware profile: one accelerator and the system it sits in.

Spec-sheet numbers (dense peaks, HBM, links, power, price) with their sources, plus a small set of
named efficiency parameters — the only free parameters of the cost model for this hardware.
Values are in the units their field names carry; ``flop_rate``/``bandwidth`` helpers return SI.
"""

from __future__ import annotations

from functools import cached_property
from typing import Annotated, Literal

import numpy as np

from pydantic import Field, NonNegativeFloat, PositiveFloat, PositiveInt, model_validator

from ..units import GIB, PRECISIONS, TERA, US, gb_s_to_bandwidth, gbit_s_to_bandwidth, tb_s_to_bandwidth
from ._base import DateStr, Spec

Precision = Literal["fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp6", "fp4"]
Fraction = Field(gt=0, le=1)
Tflops = Annotated[float, Field(gt=0, le=1e6)]
"""A dense peak, TFLOP/s: positive, at most 1e6 (an exaFLOP/s per accelerator)."""


class DenseTflops(Spec):
    """Dense (no 2:4 sparsity) tensor peak per precision, TFLOP/s (TOP/s for int8); null = unsupported."""

    fp32: Tflops | None = None
    """FP32 peak, TFLOP/s (non-tensor or tensor FP32 as the datasheet gives it)."""
    tf32: Tflops | None = None
    """TF32 tensor peak, dense, TFLOP/s."""
    bf16: Tflops | None = None
    """BF16 tensor peak, dense, TFLOP/s."""
    fp16: Tflops | None = None
    """FP16 tensor peak, dense, TFLOP/s."""
    fp8: Tflops | None = None
    """FP8 tensor peak, dense, TFLOP/s."""
    int8: Tflops | None = None
    """INT8 tensor peak, dense, TOP/s."""
    fp6: Tflops | None = None
    """FP6 tensor peak, dense, TFLOP/s."""
    fp4: Tflops | None = None
    """FP4 tensor peak, dense, TFLOP/s."""

    @model_validator(mode="after")
    def _some_precision(self):
        if self.bf16 is None and self.fp16 is None:
            raise ValueError("dense_tflops needs at least bf16 or fp16")
        return self


class ComputeSpec(Spec):
    dense_tflops: DenseTflops
    """Dense peak per precision (datasheet; sparse figures halved)."""
    exp_rate_tera_per_s: Annotated[float, Field(gt=0, le=1e5)] | None = None
    """Exponentials per second of the special-function unit (NVIDIA MUFU.EX2 results), 10^12/s:
    the softmax's exps are a third roof of attention kernels (one per score element). Null = no
    sourced rate, no exponential roof."""
    exp_rate_source: str | None = None
    """Where ``exp_rate_tera_per_s`` comes from (required with it)."""
    mamf_fraction: dict[Literal["bf16", "fp8"], Annotated[float, Field(gt=0, le=1)]] | None = None
    """Measured maximum achievable matmul FLOP/s (MAMF, large GEMMs) over the dense peak, per
    precision: a property of the die and its GEMM library, not of a serving stack. The non-LLM
    workloads (``infersim.workloads``) cost their GEMMs at it; the LLM engine uses the fitted
    ``efficiency.compute_fraction``. Null = not measured (the workloads then use
    ``compute_fraction``)."""
    mamf_source: str | None = None
    """Where ``mamf_fraction`` comes from (required with it)."""

    @model_validator(mode="after")
    def _exp_source(self):
        if (self.exp_rate_tera_per_s is None) != (self.exp_rate_source is None):
            raise ValueError("exp_rate_tera_per_s and exp_rate_source go together (both or neither)")
        if (self.mamf_fraction is None) != (self.mamf_source is None):
            raise ValueError("mamf_fraction and mamf_source go together (both or neither)")
        return self

    def mamf(self, precision: str) -> float | None:
        """Measured large-GEMM fraction of peak for ``precision`` (fp16 reads bf16's, fp4/fp6
        fp8's), or None when the profile has none for it."""
        if self.mamf_fraction is None:
            return None
        key = {"fp16": "bf16", "fp4": "fp8", "fp6": "fp8", "int8": "fp8"}.get(precision, precision)
        return self.mamf_fraction.get(key)

    @cached_property
    def exp_rate(self) -> float | None:
        """Exponentials per second, or None when the profile gives no rate."""
        return None if self.exp_rate_tera_per_s is None else self.exp_rate_tera_per_s * TERA

    def flop_rate(self, precision: str) -> float:
        """Dense peak for ``precision`` in FLOP/s; an unsupported precision runs at the next
        wider supported one (e.g. fp4 weights on H100 compute in fp8)."""
        start = PRECISIONS.index(precision)
        for p in reversed(PRECISIONS[: start + 1]):
            if p in ("int8", "fp32", "tf32"):
                continue  # LLM GEMMs fall back through the float tensor formats
            value = getattr(self.dense_tflops, p)
            if value is not None:
                return value * 1e12
        return (self.dense_tflops.bf16 or self.dense_tflops.fp16) * 1e12

    def supports(self, precision: str) -> bool:
        """True when the datasheet gives a native rate for ``precision``."""
        return getattr(self.dense_tflops, precision) is not None


class MemorySpec(Spec):
    hbm_capacity_gib: PositiveFloat = Field(le=1e5)
    """Accelerator memory capacity as labelled by the vendor (GB labels are binary-derived), GiB."""
    hbm_bandwidth_tb_s: PositiveFloat = Field(le=1e3)
    """Peak memory bandwidth, TB/s (decimal)."""
    type: str | None = None
    """Memory technology (HBM3e, GDDR6, ...), informational."""
    reserve_gib: float = Field(default=4.0, ge=0, le=1e4)
    """Memory held by the runtime (context, workspaces, fragmentation), GiB; default estimate."""
    kv_fraction: float = Field(default=0.92, gt=0, le=1)
    """Fraction of the memory left after weights and reserve that the engine gives the KV cache
    (TensorRT-LLM kvcache_free_gpu_mem_frac 0.9-0.95 in MLPerf configs)."""

    @cached_property
    def capacity_bytes(self) -> float:
        return self.hbm_capacity_gib * GIB

    @cached_property
    def bandwidth(self) -> float:
        """Peak memory bandwidth, B/s."""
        return tb_s_to_bandwidth(self.hbm_bandwidth_tb_s)


class TorusSpec(Spec):
    """Neighbour-link torus of a TPU-style scale-up fabric (ICI)."""

    link_bandwidth_gb_s: PositiveFloat = Field(le=1e4)
    """One-way bandwidth of one neighbour link, GB/s (decimal); each chip has two links (±) per
    dimension."""
    slice_shapes: list[list[PositiveInt]] = Field(min_length=1)
    """Slice shapes the provider offers, chips per dimension (e.g. [4, 4, 4]); all of one rank
    (2 for a 2D torus, 3 for 3D). A group of n chips runs on the smallest shape holding n."""
    source: str
    """Where the link rate and the slice shapes come from."""

    @model_validator(mode="after")
    def _shapes(self):
        ranks = {len(s) for s in self.slice_shapes}
        if len(ranks) != 1 or ranks.pop() not in (2, 3):
            raise ValueError("slice_shapes must all have 2 or all have 3 dimensions")
        return self

    @cached_property
    def link_bandwidth(self) -> float:
        """One-way bandwidth of one link, B/s."""
        return gb_s_to_bandwidth(self.link_bandwidth_gb_s)


class ScaleUpSpec(Spec):
    """The scale-up domain: NVLink/NVSwitch, Infinity Fabric (xGMI), TPU ICI, or PCIe."""

    technology: str
    """Link technology, informational (e.g. 'NVLink 5 + NVSwitch')."""
    domain_size: PositiveInt = Field(le=100_000)
    """Accelerators reachable over the scale-up fabric (1 = none)."""
    bandwidth_gb_s: PositiveFloat = Field(le=1e5)
    """Per-accelerator unidirectional scale-up bandwidth, GB/s (decimal)."""
    latency_us: PositiveFloat = Field(le=1e4)
    """Per-hop latency of a collective step on this fabric, microseconds."""
    topology: Literal["switch", "mesh", "torus", "pcie"]
    """switch: full bandwidth to any peer; mesh: point-to-point links (a peer gets
    bandwidth/(domain-1)); torus: neighbour links (TPU ICI), described by ``torus``; pcie: host bridge."""
    torus: TorusSpec | None = None
    """Link rate and slice shapes; required exactly when topology is 'torus'."""

    @model_validator(mode="after")
    def _torus_block(self):
        if (self.topology == "torus") != (self.torus is not None):
            raise ValueError("scale_up.torus is required when topology is 'torus' and not allowed otherwise")
        if self.torus is not None:
            largest = max(int(np.prod(s)) for s in self.torus.slice_shapes)
            if largest > self.domain_size:
                raise ValueError(f"a torus slice shape holds {largest} chips, more than domain_size {self.domain_size}")
        return self

    @cached_property
    def bandwidth(self) -> float:
        """Unidirectional per-accelerator bandwidth, B/s."""
        return gb_s_to_bandwidth(self.bandwidth_gb_s)


class ScaleOutSpec(Spec):
    """The network between scale-up domains."""

    technology: str
    """NIC / fabric, informational."""
    bandwidth_gbit_s: PositiveFloat = Field(le=1e5)
    """Per-accelerator NIC bandwidth, Gbit/s per direction."""
    latency_us: PositiveFloat = Field(le=1e5)
    """Per-hop latency across the network, microseconds."""

    @cached_property
    def bandwidth(self) -> float:
        """Per-accelerator bandwidth, B/s."""
        return gbit_s_to_bandwidth(self.bandwidth_gbit_s)


class PriceSpec(Spec):
    usd_per_hour: PositiveFloat = Field(le=1e4)
    """Price per accelerator-hour, US$ (cloud on-demand unless the note says otherwise)."""
    is_estimate: bool = True
    """True when the figure is an estimate (all bundled prices are)."""
    source: str
    """Where the figure comes from, or how the default was derived."""
    date: DateStr
    """When the figure was observed (YYYY-MM or YYYY-MM-DD)."""
    capex_usd: PositiveFloat | None = Field(default=None, le=1e8)
    """Purchase price per accelerator incl. its share of the system, US$ (TCO mode); estimate."""


class CalibrationRecord(Spec):
    """Provenance written by ``infersim calibrate``."""

    data: str
    """Data file the parameters were fitted on."""
    date: DateStr
    """Fit date (ISO)."""
    rows: int = Field(ge=0, le=10_000_000)
    """Rows used in the fit."""
    residual_median_ape: float = Field(ge=0, le=1e6)
    """In-sample median absolute percentage error after the fit, %."""
    parameters: list[str]
    """Names of the efficiency parameters that were fitted."""
    findings: list[str] = Field(default_factory=list)
    """Fitted values that ended on (or within 1 % of) a bound of their documented range."""


class EfficiencySpec(Spec):
    """Named efficiency parameters: the only free parameters of the cost model per hardware.

    Defaults are spec-sheet-derived public measurements (see ``source``); ``infersim calibrate``
    may refit them and records provenance under ``calibration``.
    """

    compute_fraction: float = Field(default=0.75, gt=0, le=1)
    """Achievable fraction of dense peak for large GEMMs (max achievable matmul FLOPS / peak)."""
    memory_fraction: float = Field(default=0.8, gt=0, le=1)
    """Achievable fraction of peak HBM bandwidth for streaming reads."""
    moe_memory_fraction: float = Field(default=0.29, gt=0, le=1)
    """Achievable fraction of peak HBM bandwidth for the weight stream of routed-expert grouped
    GEMMs. A decode step's grouped GEMM reads every touched expert for a few rows each: many small
    per-expert problems, unequal tiles per expert, the routing's gather in the same kernel. MoE
    decode measured at 34 % of the achievable memory roofline where a dense model on the same
    engine reaches 94 % (jundot/omlx issue 2238, M3 Ultra); a fused MoE kernel at 1-8 tokens on
    MI355X takes 0.13-0.42 ms for a few MB of experts (sgl-project/sglang PR 22208). Default: that
    measured share, 34 / 94 of the dense streaming default (0.8), 0.29 of peak."""
    fp4_memory_fraction: float = Field(default=0.375, gt=0, le=1)
    """Achievable fraction of peak HBM bandwidth for the weight stream of dense block-scaled FP4
    GEMMs (NVFP4 weights and activations, one fp8 scale per 16 elements) on a GPU with FP4 tensor
    cores. A decode GEMM of a few rows is a weight stream, and the block-scaled kernels stream
    slower than 8- and 16-bit ones: on one B200, an M = 1, N = K = 8,192 NVFP4 GEMM (CUTLASS
    backend) at 1.78 TB/s of 8 TB/s (0.22), where a 16-bit GEMM of the same size reaches 5-6 TB/s
    (flashinfer-ai/flashinfer issue 1732, 2025-09-19); an NVFP4 grouped GEMM at M = 16 on B200
    at 3 TB/s, 4 TB/s transposed (0.375-0.5), where MXFP8 comes close to 6 TB/s (NVIDIA/cutlass
    issue 2266, 2025-04). Routed experts keep ``moe_memory_fraction``; a GPU without FP4 tensor
    cores streams at ``memory_fraction``. Default: the M = 16 measurement, 3 of 8 TB/s (0.375)."""
    kv_memory_fraction: float = Field(default=0.5, gt=0, le=1)
    """Achievable fraction of peak HBM bandwidth when decode attention reads a paged KV cache
    (scattered blocks; measured 42 % paged / 57 % contiguous K/V on H100, mikamirai.com 2026-03)."""
    attention_fraction: float = Field(default=0.5, gt=0, le=1)
    """Achievable fraction of dense peak in attention kernels (FlashAttention-class prefill)."""
    mla_decode_fraction: float | None = Field(default=None, gt=0, le=1)
    """Achievable fraction of dense peak in absorbed multi-head-latent-attention decode kernels
    (only the MLA decode attention op reads it; every other attention op uses
    ``attention_fraction``). None: the MLA decode op runs at ``attention_fraction`` too.
    Physical range 0.3-0.9: FlashMLA reaches 660 TFLOPS BF16 compute-bound on H800 SXM5, 0.67 of
    its 989 TFLOPS dense peak (0.76 of the ~865 TFLOPS it sustains when clocks throttle to ~1.6 GHz;
    the earlier release 580 TFLOPS = 0.59) (deepseek-ai/FlashMLA README, update 2025-04-22, and
    docs/20250422-new-kernel-deep-dive.md). The kernel is compute-bound because the 128 query heads
    of a token share one 576-wide latent: about 2·H FLOPs per KV byte. Not a default: at 0.67 on
    every profile DeepSeek-R1's median error on the MLPerf rows rises from 18 % to 30 % (predicted
    too fast), and a refit with it free puts it at 0.21-0.47 on B200/B300/GB200/GB300."""
    exp_fraction: float = Field(default=0.71, gt=0, le=1)
    """Achievable fraction of ``compute.exp_rate_tera_per_s`` in attention kernels (softmax
    exponentials on the special-function unit, plus the share a kernel emulates on the FMA units).
    Default: FlashAttention-4 forward reaches 71 % of B200's dense BF16 peak at head dimension 128,
    where the exponential roof equals that peak (16 exp2/clock/SM against 8,192 BF16 FLOPs/clock/SM,
    512 FLOPs per exponential), emulating 10-25 % of the exponentials (Zadouri, Hoehnerbach, Shah,
    Liu, Thakkar, Dao, FlashAttention-4, arXiv 2603.05451; together.ai/blog/flashattention-4).
    A separate efficiency from ``attention_fraction``: that one is fitted end to end to the MLPerf
    rows, where decode attention dominates, and is too low for the exponential unit. Read by the
    LLM engine's max() roof only; the non-LLM workloads add the SFU time at the unit's full rate
    to the MMA time instead (``dense_attention_fraction``, ``softmax_overlap``)."""
    dense_attention_fraction: float = Field(default=0.75, gt=0, le=1)
    """Achievable fraction of dense peak in the tensor-core (MMA) work of a long-sequence, unpaged
    attention kernel, its softmax exponentials not counted (they are a separate term, see
    ``softmax_overlap``). Default: FlashAttention-3 forward reaches 740 TFLOPS = 75 % of H100's
    dense FP16 peak at head dimension 128, long sequences, with the softmax hidden behind the MMAs
    (Shah et al., arXiv 2407.08608; shared/reference/effects.md section 6). Only the non-LLM
    workloads (``infersim.workloads``: WAN-2.2's video attention over 75,600 tokens, DLRMv3's HSTU
    attention over ~8,800) read it; LLM serving mixes paged decode, short prefills and scheduling
    into the fitted ``attention_fraction`` (0.17-0.40), which does not transfer to these kernels."""
    softmax_overlap: float = Field(default=0.0, ge=0, le=1)
    """Share of the shorter of an attention kernel's MMA and special-function-unit (exponential,
    reciprocal) times hidden behind the longer one, in the non-LLM workloads' attention:
    time = t_mma + t_sfu − softmax_overlap·min(t_mma, t_sfu), the SFU at
    ``compute.exp_rate_tera_per_s``. 0: a kernel that does the scores' MMA, then their softmax
    (FlashAttention-2 style, and FlashAttention-3 with its ping-pong and intra-warpgroup
    pipelining removed: 661 → 570 TFLOPS in the paper's ablation); 1: the ideal max() of
    FlashAttention-3/4's overlapped schedules."""
    gemm_m_half: NonNegativeFloat = Field(default=32.0, le=1e6)
    """GEMM rows (tokens) at which compute efficiency falls to half of compute_fraction; models
    tile under-utilisation of small-M GEMMs: eff(m) = compute_fraction * m / (m + gemm_m_half)."""
    gemm_k_overhead_blocks: NonNegativeFloat = Field(default=0.0, le=64)
    """Fixed time per output tile of a GEMM, in mainloop k-blocks (one k-block spans 128 bytes of
    each operand row: 64 BF16, 128 FP8 or 256 FP4 elements, the TMA 128-byte swizzle width):
    pipeline fill, scale loads and the epilogue's store, not hidden behind the mainloop. A GEMM whose
    per-rank reduction depth K takes n = ⌈K / block⌉ k-blocks runs at n / (n + this) of its
    large-K efficiency. Measured: DeepGEMM's FP8 GEMMs on H800 at M 4096 (README of 2025-04-09,
    deepseek-ai/DeepGEMM@327ec92) reach 1520 TFLOPS at K 16384, 1410 at 7168, 1212 at 1536, 1168
    at 2048 and 775 at K 512 (4 k-blocks of 128); the 512/16384 ratio gives 4.1, which predicts the
    other three within 7 %. The NVIDIA Hopper and Blackwell profiles set 4.1 (TMA-fed tile
    pipelines; Blackwell's value is not measured); default 0 (off) where no measurement exists. It
    matters where TP slices a narrow reduction: DeepSeek-R1's expert down-projection under expert
    TP8 has K 2048/8 = 256, one FP4 k-block."""
    gemm_overlap: float = Field(default=1.0, ge=0, le=1)
    """Share of the shorter of a GEMM's operand-load and MMA times hidden behind the longer one:
    GEMM time = tc + tm − gemm_overlap·min(tc, tm); 1 = the ideal roofline max(tc, tm). Pipeline
    fill and drain of a GEMM with few tiles per SM do not overlap."""
    comm_fraction: float = Field(default=0.8, gt=0, le=1)
    """Achievable fraction of link bandwidth in collectives (NCCL ring bus bandwidth / spec)."""
    all_reduce_fraction: float | None = Field(default=None, gt=0, le=1.5)
    """All-reduce bus bandwidth inside one switched scale-up domain as a fraction of the
    unidirectional link rate, where it differs from ``comm_fraction``'s ring: NVLink SHARP (NVLS,
    NVSwitch generation 3 and later) reduces in the switch, so the bus bandwidth NCCL reports
    (measured against the ring's 2(n − 1)/n volume, as the model prices it) exceeds the link rate
    (8x H200 482 GB/s of 450, 1.07). Only all-reduce, only on ``scale_up.topology`` "switch", only
    the scale-up phase. None: ``comm_fraction``. The bundled profiles leave it unset (docs/readme-sessions.md,
    "Twenty-third session")."""
    launch_overhead_us: NonNegativeFloat = Field(default=4.0, le=1e4)
    """Host launch + sync cost per kernel without graph capture, microseconds."""
    step_overhead_ms: NonNegativeFloat = Field(default=0.5, le=1e4)
    """Fixed scheduler / sampling / host cost per engine step, milliseconds."""
    kernels_as: str | None = Field(default=None, min_length=1, max_length=200)
    """Hardware profile whose GPU die this one carries (e.g. GB200 NVL72's GPU is the B200 GPU):
    kernels run at the same fractions of their peaks on both, so ``infersim calibrate`` fits the
    kernel efficiencies (``accuracy.params.KERNEL_PARAMETERS``) of the two as one value from both
    profiles' rows; the host cost per step (a different CPU) stays each profile's own. None: its own."""
    host_as: str | None = Field(default=None, min_length=1, max_length=200)
    """Hardware profile whose host this one carries (e.g. GB300 NVL72 and GB200 NVL72 both run their
    engines on the same Grace CPUs): the per-step host cost (``accuracy.params.HOST_PARAMETERS``) is
    the CPU's and the serving stack's, so ``infersim calibrate`` fits it as one value from both
    profiles' rows. None: its own."""
    transfer_as: str | None = Field(default=None, min_length=1, max_length=200)
    """Hardware profile on the same GPU die that ``infersim calibrate`` fits separately (different
    memory, clocks or software rounds: H200 and H100 SXM are both GH100): where one of the two has
    no fitted values of its own (too few rows, or held out by leave-one-hardware-out), it takes the
    other's fitted kernel efficiencies instead of the fleet's ratios (``accuracy.cv.transfer_prior``);
    either direction. None: none."""
    source: list[str] = Field(default_factory=list)
    """Where the default values come from."""
    calibration: CalibrationRecord | None = None
    """Set by ``infersim calibrate``: data, date and residual of the fit."""


FP4_EFFICIENCIES: tuple[str, ...] = ("fp4_memory_fraction",)
"""Efficiency fields of FP4 tensor-core kernels: a GPU without them streams FP4 weights at
``memory_fraction``, and calibrate neither fits nor writes these for it."""


class HardwareSpec(Spec):
    """One accelerator and its system: compute, memory, interconnect, power and price."""

    name: str
    """Human-readable name."""
    vendor: str
    """Vendor name."""
    release_year: int | None = Field(default=None, ge=2000, le=2100)
    """Year of general availability."""
    source: list[str] = Field(min_length=1)
    """Datasheets and measurements every number in this file comes from."""
    compute: ComputeSpec
    memory: MemorySpec
    scale_up: ScaleUpSpec
    scale_out: ScaleOutSpec
    tdp_w: PositiveFloat | None = Field(default=None, le=1e5)
    """Board power at maximum, watts (null where unpublished)."""
    price: PriceSpec
    efficiency: EfficiencySpec = EfficiencySpec()
    notes: list[str] = Field(default_factory=list)
    """Free-text notes (label disagreements, estimates)."""

    @property
    def launch_overhead(self) -> float:
        """Per-kernel launch overhead, seconds."""
        return self.efficiency.launch_overhead_us * US

    def has_efficiency(self, name: str) -> bool:
        """Whether efficiency field ``name`` applies to this hardware: an FP4-only one
        (``FP4_EFFICIENCIES``) only where it has FP4 tensor cores."""
        return name not in FP4_EFFICIENCIES or self.compute.supports("fp4")
