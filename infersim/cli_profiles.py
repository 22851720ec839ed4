"""What ``infersim profiles list|show`` print about a profile: table rows, derived quantities and
the kind of a profile named by ID or path. Formatting only; every quantity comes from the specs."""

from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import Any

from . import files
from .errors import SpecError
from .specs import catalog
from .specs._base import read_yaml
from .specs.hardware import HardwareSpec
from .specs.model import ModelSpec


def fmt(value: Any) -> str:
    """Numbers with thousands separators and at most two decimals; None as a dash."""
    if value is None:
        return "–"
    if isinstance(value, float):
        value = round(value, 2)
        return f"{int(value):,}" if value.is_integer() else f"{value:,}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def si(value: float, unit: str) -> str:
    """``value`` in SI base units, also with a decimal prefix: 9.894e+14 FLOP/s (989.4 TFLOP/s)."""
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value:.4g} {unit} ({value / factor:,.4g} {prefix}{unit})"
    return f"{value:.4g} {unit}"


def detect_kind(name: str, kind: str | None) -> str:
    """The profile kind of ``name`` (an ID or a path), from --kind, the catalog or the file."""
    if kind is not None:
        return kind
    text = str(name)
    if text.endswith((".yaml", ".yml")) or "/" in text or os.sep in text:
        return kind_of_file(Path(text))
    owners = [k for k in catalog.KINDS if text in catalog.list_ids(k)]
    if len(owners) == 1:
        return owners[0]
    if owners:
        raise SpecError(f"ID '{text}' names a {' and a '.join(owners)} profile; pass --kind")
    known = sorted({i for k in catalog.KINDS for i in catalog.list_ids(k)})
    close = difflib.get_close_matches(text, known, n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else "; see 'infersim profiles list'"
    raise SpecError(f"unknown profile ID '{text}'{hint}")


def kind_of_file(path: Path) -> str:
    """Guess a file's kind from its folder, else from its top-level keys."""
    for kind, folder in catalog.FOLDERS.items():
        if path.parent.name == folder:
            return kind
    files.check_regular_file(path, what="profile", limit=files.MAX_YAML_BYTES)
    data = read_yaml(path)
    keys = set(data) if isinstance(data, dict) else set()
    for kind, marker in (("hardware", "compute"), ("model", "attention"), ("scenario", "workload")):
        if marker in keys:
            return kind
    raise SpecError("cannot tell whether this is a hardware, model or scenario profile; pass --kind", file=str(path))


# ---- rows of the list and show tables (formatting only; quantities come from the specs) --
def _hardware_row(pid: str, hw: HardwareSpec) -> list[Any]:
    t = hw.compute.dense_tflops
    return [pid, hw.name, t.bf16 or t.fp16, t.fp8, t.fp4, hw.memory.hbm_capacity_gib, hw.memory.hbm_bandwidth_tb_s,
            f"{hw.scale_up.domain_size} × {hw.scale_up.bandwidth_gb_s:g} GB/s", f"{hw.price.usd_per_hour:.2f}"]


def _experts(m: ModelSpec) -> str:
    if m.moe is None:
        return "dense"
    shared = f" +{m.moe.n_shared_experts} shared" if m.moe.n_shared_experts else ""
    return f"{m.moe.n_routed_experts}/{m.moe.top_k}{shared}"


def _model_row(pid: str, m: ModelSpec) -> list[Any]:
    return [pid, m.name, f"{m.total_params / 1e9:,.1f}", f"{m.active_params / 1e9:,.1f}", m.n_layers, m.attention.kind,
            _experts(m), int(m.kv_bytes_per_token("bf16"))]


def _scenario_row(pid: str, s) -> list[Any]:
    slo = getattr(s, "slo", None)
    return [pid, s.kind, s.model, s.workload.isl.mean, s.workload.osl.mean,
            slo.ttft_ms if slo else None, slo.tpot_ms if slo else None]


LIST_COLUMNS = {
    "hardware": ("ID", "name", "bf16 TFLOP/s", "fp8 TFLOP/s", "fp4 TFLOP/s", "HBM GiB", "HBM TB/s",
                 "scale-up domain", "$/h"),
    "model": ("ID", "name", "total B", "active B", "layers", "attention", "experts (E/top-k)", "KV B/token bf16"),
    "scenario": ("ID", "kind", "model", "ISL mean", "OSL mean", "TTFT ms", "TPOT ms"),
}
LIST_ROW = {"hardware": _hardware_row, "model": _model_row, "scenario": _scenario_row}


def list_row(kind: str, pid: str, spec) -> list[Any]:
    from . import workloads  # non-LLM model and scenario specs fill the same columns

    return workloads.profile_row(pid, spec) if workloads.is_workload_spec(spec) else LIST_ROW[kind](pid, spec)


def derived(kind: str, spec) -> list[tuple[str, str]]:
    from . import workloads

    return workloads.derived_rows(spec) if workloads.is_workload_spec(spec) else DERIVED[kind](spec)


def _derived_hardware(hw: HardwareSpec) -> list[tuple[str, str]]:
    rows = [(f"{p} dense peak", si(hw.compute.flop_rate(p), "FLOP/s"))
            for p in ("bf16", "fp8", "fp4") if hw.compute.supports(p)]
    rows += [
        ("HBM capacity", si(hw.memory.capacity_bytes, "B")),
        ("HBM bandwidth", si(hw.memory.bandwidth, "B/s")),
        ("bf16 ridge point", f"{hw.compute.flop_rate('bf16') / hw.memory.bandwidth:,.0f} FLOP/B"),
        ("scale-up bandwidth", f"{si(hw.scale_up.bandwidth, 'B/s')} per accelerator, domain {hw.scale_up.domain_size}"),
        ("scale-out bandwidth", f"{si(hw.scale_out.bandwidth, 'B/s')} per accelerator"),
        ("price", f"${hw.price.usd_per_hour:.2f} per accelerator-hour"
                  f"{' (estimate)' if hw.price.is_estimate else ''}, {hw.price.date}"),
    ]
    return rows


def _derived_model(m: ModelSpec) -> list[tuple[str, str]]:
    rows = [("total parameters", f"{m.total_params / 1e9:.1f} B"), ("active parameters", f"{m.active_params / 1e9:.1f} B")]
    rows += [(f"weights at {p}", f"{m.weight_bytes(p) / 1e9:,.1f} GB (embeddings bf16)") for p in ("bf16", "fp8", "fp4")]
    rows += [(f"KV cache per token {p}", f"{m.kv_bytes_per_token(p):,.0f} B") for p in ("bf16", "fp8")]
    if m.sliding_kv_bytes_per_token("bf16"):
        rows.append(("sliding-window KV per token bf16", f"{m.sliding_kv_bytes_per_token('bf16'):,.0f} B (capped at the window)"))
    rows.append(("layers", f"{m.n_layers} ({m.n_dense_layers} dense, {m.n_moe_layers} MoE)"))
    return rows


def _derived_scenario(s) -> list[tuple[str, str]]:
    w, slo = s.workload, getattr(s, "slo", None)
    rows = [("kind", s.kind), ("model", fmt(s.model))]
    rows += [(f"{name} mean / p50 / p99 / max", " / ".join(fmt(v) for v in (L.mean, L.p50, L.p99, L.max)) + " tokens")
             for name, L in (("ISL", w.isl), ("OSL", w.osl))]
    rows.append(("tokens per request (mean)", f"{fmt(w.isl.mean + w.osl.mean)}"))
    if slo is not None:
        rows += [(f"p{slo.percentile:g} {name} limit", f"{v:g} ms")
                 for name, v in (("TTFT", slo.ttft_ms), ("TPOT", slo.tpot_ms), ("E2E", slo.e2e_ms)) if v is not None]
    return rows


DERIVED = {"hardware": _derived_hardware, "model": _derived_model, "scenario": _derived_scenario}
