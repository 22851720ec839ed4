"""The ``sweep`` and ``plan`` commands (registered on the app by ``infersim.cli``): parse → one
library call → render, like every command."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from .errors import SpecError

DISPATCH_HELP = ("How the front end hands requests to the instances (Server/Interactive, several instances): random, "
                 "round_robin, load_balancing (to the fewest in flight) or fewest_tokens (to the fewest prompt tokens "
                 "waiting); default: the round preset's (random).")
"""``--dispatch``'s help on ``run``, ``pareto`` and ``plan``."""


# the latency-limit flags every command that searches takes (``query.apply_slo``)
TtftMs = Annotated[Optional[float], typer.Option("--ttft-ms", help="Replace the scenario's TTFT limit, ms (Server/Interactive).")]
TpotMs = Annotated[Optional[float], typer.Option("--tpot-ms", help="Replace the scenario's TPOT limit, ms (Server/Interactive).")]
E2eMs = Annotated[Optional[float], typer.Option("--e2e-ms", help="Replace the scenario's end-to-end latency limit, ms "
                                                                 "(Server/Interactive).")]
SloPercentile = Annotated[Optional[float], typer.Option("--slo-percentile", help="Replace the percentile the latency "
                                                        "limits apply to, e.g. 90 (default: the scenario's, 99 for MLPerf).")]


def slo_overrides(ttft_ms: float | None, tpot_ms: float | None, e2e_ms: float | None = None,
                  percentile: float | None = None) -> dict | None:
    """The latency-limit flags given, as ``query.apply_slo``'s mapping (None where none is given:
    ``capacity.plan`` checks the limits up front only then)."""
    d = {"ttft_ms": ttft_ms, "tpot_ms": tpot_ms, "e2e_ms": e2e_ms, "percentile": percentile}
    return {k: v for k, v in d.items() if v is not None} or None


def _list(text: str | None, kind: type, flag: str) -> list | None:
    """'a,b,c' → [a, b, c] converted to ``kind`` (None when the flag is absent)."""
    if text is None:
        return None
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise SpecError(f"{flag} expects a comma-separated list (got '{text}')")
    out = []
    for t in items:
        try:
            value = kind(t)
        except ValueError:
            raise SpecError(f"{flag}: '{t}' is not a valid {kind.__name__}") from None
        if kind is int and isinstance(value, int) and str(value) != t.lstrip("+"):
            raise SpecError(f"{flag}: '{t}' is not an integer")
        out.append(value)
    return out


def _batch(text: str | None):
    """'1,2,4' (values) or 'START:STOP:NUM[:linear|geometric]' (a range)."""
    if text is None:
        return None
    if ":" in text:
        parts = text.split(":")
        if len(parts) not in (3, 4):
            raise SpecError(f"--batch range is START:STOP:NUM[:linear|geometric] (got '{text}')")
        try:
            start, stop, num = float(parts[0]), float(parts[1]), int(parts[2])
        except ValueError:
            raise SpecError(f"--batch range is START:STOP:NUM[:linear|geometric] (got '{text}')") from None
        return {"start": start, "stop": stop, "num": num, "spacing": parts[3] if len(parts) == 4 else "geometric"}
    return _list(text, float, "--batch")


def _progress_bar(total_label: str):
    """A rich progress bar on stderr (a no-op callback when stderr is not a terminal)."""
    if not sys.stderr.isatty():
        return None, (lambda **kw: None)
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                   TextColumn("{task.fields[info]}"), console=Console(stderr=True), transient=True)
    task = bar.add_task(total_label, total=None, info="")
    return bar, (lambda **kw: bar.update(task, **kw))


def sweep_cmd(
    spec_file: Optional[Path] = typer.Argument(None, help="Sweep YAML (axes as lists); flags below add or replace axes."),
    hardware: Optional[str] = typer.Option(None, "--hardware", "-H", help="Hardware IDs, comma-separated."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Model IDs, comma-separated (default: the scenario's)."),
    scenario: Optional[str] = typer.Option(None, "--scenario", "-s", help="Scenario IDs, comma-separated."),
    accelerators: Optional[str] = typer.Option(None, "--accelerators", "-n", help="Accelerator counts, comma-separated."),
    round_: Optional[str] = typer.Option(None, "--round", help="Round presets, comma-separated (e.g. v5.1,v6.0)."),
    tp: Optional[str] = typer.Option(None, "--tp", help="Tensor-parallel sizes (default: searched)."),
    pp: Optional[str] = typer.Option(None, "--pp", help="Pipeline stages (default: searched)."),
    ep: Optional[str] = typer.Option(None, "--ep", help="Expert-parallel sizes (default: searched)."),
    dp: Optional[str] = typer.Option(None, "--dp", help="Attention data-parallel sizes (default: searched)."),
    batch: Optional[str] = typer.Option(None, "--batch", help="Batch values '1,8,64' or a range 'START:STOP:NUM[:linear]'."),
    isl: Optional[str] = typer.Option(None, "--isl", help="Mean input lengths, tokens, comma-separated."),
    osl: Optional[str] = typer.Option(None, "--osl", help="Mean output lengths, tokens, comma-separated."),
    optimizations: Optional[list[str]] = typer.Option(None, "--optimizations", help="A set of optimizations to enable, comma-separated ('none' for none); repeat for several cells."),
    disable: Optional[list[str]] = typer.Option(None, "--disable", help="Optimization turned off everywhere (repeatable)."),
    price: Optional[str] = typer.Option(None, "--price-per-hour", help="US$ per accelerator-hour values, comma-separated."),
    set_: Optional[list[str]] = typer.Option(None, "--set", metavar="KIND.PARAM=V1,V2", help="Optimization parameter values as an axis (repeatable), e.g. mtp.depth=1,2,3 or disagg.decode_workers=36,40,44."),
    dispatch: Optional[str] = typer.Option(None, "--dispatch", help="Request dispatch to the instances as an axis, comma-separated: random, round_robin, load_balancing, fewest_tokens (default: the round preset's)."),
    ttft_ms: Optional[str] = typer.Option(None, "--ttft-ms", help="TTFT limits, ms, replacing the scenario's, as an axis, comma-separated (Server/Interactive)."),
    tpot_ms: Optional[str] = typer.Option(None, "--tpot-ms", help="TPOT limits, ms, replacing the scenario's, as an axis, comma-separated (Server/Interactive)."),
    keep: Optional[str] = typer.Option(None, "--keep", help="Rows per cell: all (default), best or pareto."),
    out: Optional[Path] = typer.Option(None, "--out", help="Stream the rows to this .parquet or .csv file."),
    workers: Optional[int] = typer.Option(None, "--workers", help="Local processes (default: CPU count)."),
    scheduler: Optional[str] = typer.Option(None, "--scheduler", help="Run on a Dask scheduler, e.g. tcp://host:8786."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Evaluate every point of a grid of named axes; stream all contract metrics and the meets-limits mask."""
    from . import sweep
    from .specs._base import read_yaml, validate_data

    data = dict(read_yaml(spec_file)) if spec_file is not None else {}
    flags = {"hardware": _list(hardware, str, "--hardware"), "model": _list(model, str, "--model"),
             "scenario": _list(scenario, str, "--scenario"), "accelerators": _list(accelerators, int, "--accelerators"),
             "round": _list(round_, str, "--round"), "tp": _list(tp, int, "--tp"), "pp": _list(pp, int, "--pp"),
             "ep": _list(ep, int, "--ep"), "dp": _list(dp, int, "--dp"), "batch": _batch(batch),
             "isl": _list(isl, float, "--isl"), "osl": _list(osl, float, "--osl"),
             "price_per_hour": _list(price, float, "--price-per-hour"), "keep": keep,
             "dispatch": _list(dispatch, str, "--dispatch"),
             "ttft_ms": _list(ttft_ms, float, "--ttft-ms"), "tpot_ms": _list(tpot_ms, float, "--tpot-ms"),
             "optimizations": [[] if o.strip() == "none" else _list(o, str, "--optimizations") for o in optimizations]
             if optimizations else None, "disable": list(disable) if disable else None}
    data.update({k: v for k, v in flags.items() if v is not None})
    if set_:
        data["params"] = {**dict(data.get("params") or {}), **_param_axes(set_)}
    spec = validate_data(sweep.SweepSpec, data, file=str(spec_file) if spec_file else "command line")
    if workers is not None and not 1 <= workers <= 256:
        raise SpecError(f"--workers must be in [1, 256] (got {workers})")
    cells = spec.cells()
    bar, update = _progress_bar(f"sweep ({len(cells)} cells)")
    if bar is not None:
        bar.start()
    try:
        summary, _ = sweep.run(spec, out, workers=workers, scheduler=scheduler,
                               progress=lambda k, total, pts: update(completed=k, total=total,
                                                                     info=f"{pts:,} points"))
    finally:
        if bar is not None:
            bar.stop()
    d = summary.to_dict()
    if as_json:
        typer.echo(json.dumps(d))
    else:
        typer.echo(f"{d['cells']} cells, {d['points']:,} points evaluated, {d['rows']:,} rows kept in "
                   f"{d['seconds']:.2f} s ({d['points_per_s']:,.0f} points/s)" + (f" -> {d['out']}" if d["out"] else ""))


def _param_axes(items: list[str]) -> dict[str, list]:
    """'KIND.PARAM=V1,V2' flags → {"KIND.PARAM": [V1, V2]}, each value read and checked as ``run
    --set`` reads it (``checks.parse_param_overrides``; a value in brackets is one list value)."""
    from .checks import parse_param_overrides

    out: dict[str, list] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or "." not in key or not text.strip():
            raise SpecError(f"--set expects KIND.PARAM=V1,V2, e.g. mtp.depth=1,2,3 (got '{item[:80]}')")
        kind, _, param = key.strip().partition(".")
        parts = [text] if text.strip().startswith("[") else text.split(",")
        out[key.strip()] = [parse_param_overrides([f"{key.strip()}={p}"])[kind][param] for p in parts]
    return out


def plan_cmd(
    hardware: str = typer.Option(..., "--hardware", "-H", help="Candidate hardware IDs, comma-separated."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Model ID or file (default: the scenario's)."),
    scenario: str = typer.Option(..., "--scenario", "-s", help="Scenario ID or file (traffic and latency limits)."),
    target_tokens: Optional[float] = typer.Option(None, "--target-tokens-per-s", help="Output tokens/s to serve."),
    target_requests: Optional[float] = typer.Option(None, "--target-requests-per-s", help="Requests/s to serve."),
    trace: Optional[Path] = typer.Option(None, "--trace", help="Request trace CSV replacing the scenario's traffic "
                                         "(isl, osl[, arrival_s, prefix_id, prefix_tokens]); without a target its "
                                         "arrival rate is the load."),
    round_: Optional[str] = typer.Option(None, "--round", help="Round preset (default: latest)."),
    price: Optional[float] = typer.Option(None, "--price-per-hour", help="US$ per accelerator-hour for every candidate."),
    max_accelerators: int = typer.Option(100_000, "--max-accelerators", help="Largest fleet considered per candidate."),
    enable: Optional[list[str]] = typer.Option(None, "--enable", help="Force an optimization on (repeatable)."),
    disable: Optional[list[str]] = typer.Option(None, "--disable", help="Turn an optimization off (repeatable)."),
    fmt: str = typer.Option("table", "--format", help="table, json or csv."),
    out: Optional[Path] = typer.Option(None, "--out", help="Also write the plan to this .json or .csv file."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Bar chart of US$/month per candidate (PNG)."),
    dispatch: Optional[str] = typer.Option(None, "--dispatch", help=DISPATCH_HELP),
    ttft_ms: TtftMs = None,
    tpot_ms: TpotMs = None,
    e2e_ms: E2eMs = None,
    slo_percentile: SloPercentile = None,
) -> list:
    """Fewest accelerators (and cost) of each candidate hardware that serve a target load within the limits."""
    from . import capacity

    if fmt not in ("table", "json", "csv"):
        raise SpecError(f"--format must be table, json or csv (got '{fmt}')")
    candidates = capacity.plan(_list(hardware, str, "--hardware"), model, scenario, target_tokens_per_s=target_tokens,
                               target_requests_per_s=target_requests, round=round_, price_per_hour=price,
                               max_accelerators=max_accelerators, enable=enable or (), disable=disable or (),
                               progress=lambda hw: typer.echo(f"planning {hw} …", err=True), trace=trace,
                               dispatch=dispatch, slo=slo_overrides(ttft_ms, tpot_ms, e2e_ms, slo_percentile))
    rows = [c.to_dict() for c in candidates]
    if plot is not None:
        capacity.plot(candidates, plot, f"{model or scenario} · {scenario}")
    return rows
