"""What ``infersim run`` needs for a non-LLM model: dispatch test, flag check, tables."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from ..errors import SpecError
from ..specs import catalog
from ..specs.workload_models import NonLlmScenarioSpec
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
