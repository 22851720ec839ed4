"""What ``infersim run`` needs for a non-LLM model: dispatch test, flag check, tables."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from ..errors import SpecError
from ..specs import catalog
from ..specs.workload_models import DiffusionVideoModelSpec, GenerativeRecommenderSpec, NonLlmScenarioSpec
from .predict import is_workload_model


def handles(model, scenario) -> bool:
    """True when the model (or, without one, the scenario) is a non-LLM workload."""
    sc = catalog.load("scenario", scenario) if isinstance(scenario, str) else scenario
    non_llm_scenario = isinstance(sc, NonLlmScenarioSpec)
    if model is None:
        return non_llm_scenario
    if is_workload_model(model):
        return True
    if non_llm_scenario:
        raise SpecError(f"scenario '{scenario}' is a {sc.workload.kind} scenario; model '{model}' is an LLM", path="--scenario")
    return False


def reject_llm_flags(**flags: Any) -> None:
    """Bad input: an LLM-only flag given for a non-LLM model."""
    given = [name for name, value in flags.items() if value not in (None, False, [], ())]
    if given:
        raise SpecError(f"--{given[0].replace('_', '-')} applies to LLM models only "
                        "(non-LLM layouts are searched; see infersim run --help)")


def _ms(v) -> str:
    return "—" if v is None else f"{v * 1e3:,.1f}"


def tables(d: dict[str, Any]) -> list[Table]:
    """Headline, configuration and time breakdown of ``WorkloadPrediction.to_dict()``."""
    head = Table(title=f"{d['hardware']} × {d['accelerators']}  ·  {d['model']}  ·  {d['scenario']}",
                 title_justify="left", show_header=False)
    head.add_column("quantity")
    head.add_column("value", justify="right")
    rows = [("samples/s (system)", f"{d['samples_per_s']:,.4g}"),
            ("samples/s per accelerator", f"{d['samples_per_s_per_accelerator']:,.4g}")]
    if d.get("latency_percentile") is not None:
        rows.append((f"latency p{d['latency_percentile']:g}", f"{_ms(d['latency_s'])} ms"))
    else:
        rows.append(("latency of one sample / batch", f"{_ms(d['latency_s'])} ms"))
    if d.get("usd_per_million_samples") is not None:
        rows.append(("$ per M samples", f"{d['usd_per_million_samples']:,.2f}"))
    for k, v in d["config"].items():
        rows.append((k.replace("_", " "), f"{v:,.4g}" if isinstance(v, float) else str(v)))
    for r in rows:
        head.add_row(*r)
    b = d["breakdown"]
    total = sum(b["by_kind_s"].values()) or 1.0
    bt = Table(title=f"time by kind — bound: {b['bound']}", title_justify="left")
    for col in ("part", "ms", "share"):
        bt.add_column(col, justify="left" if col == "part" else "right")
    for part, dict_ in (("stage", b.get("stages_s", {})), ("kind", b["by_kind_s"])):
        for k, v in dict_.items():
            bt.add_row(f"{part}: {k.removesuffix('_s')}", _ms(v), f"{v / total:.1%}")
    return [head, bt]


def is_workload_spec(spec) -> bool:
    """True for the model and scenario specs of the non-LLM workloads."""
    return isinstance(spec, (DiffusionVideoModelSpec, GenerativeRecommenderSpec, NonLlmScenarioSpec))


def profile_row(pid: str, spec) -> list[Any]:
    """A ``profiles list`` row in the LLM columns (model: ID, name, total B, active B, layers,
    attention, experts, KV B/token; scenario: ID, kind, model, ISL, OSL, TTFT, TPOT)."""
    if isinstance(spec, DiffusionVideoModelSpec):
        d = spec.transformer
        return [pid, spec.name, f"{spec.weight_params / 1e9:,.1f}", f"{d.params_per_expert / 1e9:,.1f}", d.n_layers,
                "full (video DiT)", f"{d.n_experts} noise experts", None]
    if isinstance(spec, GenerativeRecommenderSpec):
        dense = spec.hstu.n_layers * spec.hstu.params_per_layer + spec.candidate_mlp_params
        rows = sum(t.rows * t.dim for t in spec.tables)
        return [pid, spec.name, f"{(rows + dense) / 1e9:,.1f}", f"{dense / 1e9:,.3f}", spec.hstu.n_layers,
                "HSTU pointwise", "—", None]
    return [pid, spec.kind, spec.model, None, None, None, None]


def derived_rows(spec) -> list[tuple[str, str]]:
    """``profiles show`` quantities of a non-LLM model or scenario."""
    if isinstance(spec, DiffusionVideoModelSpec):
        d = spec.transformer
        return [("parameters per expert", f"{d.params_per_expert / 1e9:.2f} B"),
                ("experts (one runs per step)", str(d.n_experts)),
                ("text encoder parameters", f"{spec.text_encoder.params / 1e9:.2f} B"),
                ("resident weights at fp8 (experts) + bf16 (text encoder)",
                 f"{(d.n_experts * d.params_per_expert + 2 * spec.text_encoder.params) / 1e9:,.1f} GB")]
    if isinstance(spec, GenerativeRecommenderSpec):
        return [("embedding tables", f"{spec.table_bytes / 1e9:,.1f} GB"),
                ("HSTU parameters per layer", f"{spec.hstu.params_per_layer / 1e6:.2f} M"),
                ("longest sequence", f"{spec.hstu.max_seq_len:,} tokens")]
    w = spec.workload
    rows = [("kind", spec.kind), ("model", str(spec.model)), ("workload", w.kind)]
    if w.kind == "text_to_video":
        rows += [("video", f"{w.width_px}x{w.height_px}, {w.frames} frames"),
                 ("transformer passes", f"{w.denoising_steps} steps x {w.guidance_branches}")]
    else:
        rows += [("sequence", f"{w.history_tokens:,.0f} history + {w.candidates:,} candidates + {w.contextual_tokens}")]
    if spec.slo is not None:
        rows.append((f"p{spec.slo.percentile:g} latency limit", f"{spec.slo.latency_ms:g} ms"))
    return rows
