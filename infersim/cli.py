"""Command-line interface (typer): parse → one library call → render.

No modelling happens here. Every command body loads specs through ``infersim.specs``, calls one
library function and renders the result. Errors become one line on stderr and an exit code
(DESIGN.md): 0 success, 1 valid but infeasible (``InfeasibleError``), 2 bad input
(``SpecError``, or a usage error reported by click). An unexpected exception is a bug: it is
reported in one line with exit code 3 (``INFERSIM_DEBUG=1`` shows the traceback).

Adding a command: decorate it with ``@app.command()`` *and* ``@handle_errors`` (in that order),
call one library function and render with ``_table``/``_console``.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
from enum import Enum
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, TypeVar

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from . import __version__, checks, cli_products, files
from .cli_profiles import LIST_COLUMNS, derived, detect_kind, fmt, list_row
from .errors import InfeasibleError, SpecError
from .specs import catalog
from .specs.scenario import SLO_FIELDS as LIMIT_FIELDS

F = TypeVar("F", bound=Callable[..., Any])

EXIT_INFEASIBLE = 1
EXIT_BAD_INPUT = 2
EXIT_INTERNAL = 3
DEBUG_ENV = "INFERSIM_DEBUG"
"""Set to 1 to see the traceback of an unexpected internal error instead of a one-line message."""

app = typer.Typer(
    name="infersim",
    help="Analytical LLM inference-performance simulator: hardware × model × scenario → tokens/s, TTFT, TPOT, $/M tokens.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
profiles_app = typer.Typer(help="List and inspect hardware, model and scenario profiles.", no_args_is_help=True)
app.add_typer(profiles_app, name="profiles")


class Kind(str, Enum):
    """A profile kind, as ``--kind`` and ``schema`` take it."""

    hardware = "hardware"
    model = "model"
    scenario = "scenario"


class Group(str, Enum):
    """A profile folder, as ``profiles list`` takes it."""

    hardware = "hardware"
    models = "models"
    scenarios = "scenarios"


GROUP_KIND = {Group.hardware: "hardware", Group.models: "model", Group.scenarios: "scenario"}


# ---- error handling ------------------------------------------------------------------------
def _fail(prefix: str, exc: BaseException | str, code: int) -> typer.Exit:
    """Print ``prefix: message`` as one line on stderr and return the Exit to raise."""
    message = " ".join(str(exc).split()) or type(exc).__name__
    typer.echo(f"{prefix}: {message}", err=True)
    return typer.Exit(code)


def handle_errors(func: F) -> F:
    """Turn library exceptions into one stderr line and the contract's exit code; never a traceback."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except SpecError as exc:
            raise _fail("error", exc, EXIT_BAD_INPUT) from None
        except InfeasibleError as exc:
            raise _fail("infeasible", exc, EXIT_INFEASIBLE) from None
        except (typer.Exit, typer.Abort, KeyboardInterrupt):
            raise
        except Exception as exc:  # a bug, not bad input: say so in one line unless debugging
            if os.environ.get(DEBUG_ENV):
                raise
            raise _fail("internal error", f"{type(exc).__name__}: {exc} (set {DEBUG_ENV}=1 for a traceback)", EXIT_INTERNAL) from None

    return wrapper  # type: ignore[return-value]


# ---- shared helpers for commands -----------------------------------------------------------
def _console() -> Console:
    """A stdout console; wide when piped so that tables are not truncated."""
    console = Console(highlight=False)
    if not console.is_terminal:
        console = Console(highlight=False, width=max(console.width, 200))
    return console


def _table(title: str, columns: Iterable[str], rows: Iterable[Iterable[Any]]) -> Table:
    """A rich table; cells are plain text (no markup), numeric columns right-aligned, the first
    column never wraps (IDs stay whole)."""
    cells = [[fmt(v) for v in row] for row in rows]
    table = Table(title=title, title_justify="left")
    for i, col in enumerate(columns):
        numeric = bool(cells) and all(_NUMERIC.match(r[i]) for r in cells)
        table.add_column(col, no_wrap=(i == 0), justify="right" if numeric else "left")
    for row in cells:
        table.add_row(*(Text(c) for c in row))
    return table


_NUMERIC = re.compile(r"^(–|[-+]?[\d,]*\.?\d+)$")





# ---- inputs and outputs ------------------------------------------------------------------
_FORCE_HELP = "Replace an existing output file even when it is not an earlier output of this command."
PLOT_SUFFIXES = (".png",)
"""Image formats the pareto and ablate plots are written in."""
REPORT_SUFFIX = {"table": (".txt",), "json": (".json",), "csv": (".csv",)}
"""File suffix that each --format's text output must carry in --out."""


def _writes(command: str, *force_flags: str) -> Callable[[F], F]:
    """Run a command's body with every file write checked by the output guard (infersim.files):
    bundled folders and files that are not earlier outputs of ``command`` are refused unless one
    of ``force_flags`` (keyword arguments of the command) is set."""
    def deco(func: F) -> F:
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            force = any(kwargs.get(flag) for flag in force_flags)
            with files.writing_as(command, force=force, protected=checks.bundled_folders()):
                return func(*args, **kwargs)
        return wrapper  # type: ignore[return-value]
    return deco


def _input_csv(path: Optional[Path], flag: str) -> Optional[Path]:
    """A data CSV given on the command line: a regular file within the size limit (or None)."""
    if path is not None:
        files.check_regular_file(path, what=f"{flag} file", limit=files.MAX_CSV_BYTES)
    return path


# ---- commands ----------------------------------------------------------------------------
def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"infersim {__version__}")
        raise typer.Exit()


@app.callback()
@handle_errors
def _global_options(
    profiles_dir: Optional[list[Path]] = typer.Option(
        None, "--profiles-dir", metavar="PATH",
        help="Folder of user profiles searched before the bundled ones (repeatable; also env INFERSIM_PROFILES)."),
    version: bool = typer.Option(False, "--version", callback=_version_callback, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    """Analytical LLM inference-performance simulator."""
    for folder in reversed(profiles_dir or []):  # the first folder given wins
        catalog.add_profile_dir(folder)


@profiles_app.command("list")
@handle_errors
def profiles_list(
    group: Optional[Group] = typer.Argument(None, help="hardware, models or scenarios (default: all three)."),
) -> None:
    """List bundled and user profiles with their headline numbers."""
    console = _console()
    for g in [group] if group else list(Group):
        kind = GROUP_KIND[g]
        rows = [list_row(kind, pid, catalog.load(kind, pid)) for pid in catalog.list_ids(kind)]
        console.print(_table(g.value, LIST_COLUMNS[kind], rows))


@profiles_app.command("show")
@handle_errors
def profiles_show(
    name: str = typer.Argument(..., metavar="ID|FILE", help="A profile ID or a path to a YAML file."),
    kind: Optional[Kind] = typer.Option(None, "--kind", help="Profile kind (needed only when it cannot be told)."),
) -> None:
    """Print a profile's YAML and the quantities derived from it."""
    kind_name = detect_kind(name, kind.value if kind else None)
    path = catalog.resolve(kind_name, name)
    spec = catalog.load(kind_name, path)
    typer.echo(f"# {path}")
    typer.echo(files.read_text(path, what="profile", limit=files.MAX_YAML_BYTES).rstrip("\n"))
    _console().print(_table(f"derived ({kind_name} {path.stem})", ("quantity", "value"), derived(kind_name, spec)))


@app.command("schema")
@handle_errors
def schema_cmd(kind: Kind = typer.Argument(..., help="hardware, model or scenario.")) -> None:
    """Print the JSON Schema of a profile kind (for editors and validators)."""
    typer.echo(json.dumps(catalog.schema(kind.value), indent=2))


class OutputFormat(str, Enum):
    table = "table"
    json = "json"


_ENABLE_HELP = "Turn an optimization on (repeatable): fusion, overlap, attention_dp, mtp, wide_ep, disagg, kv_routing."


@app.command("run")
@handle_errors
def run_cmd(
    hardware: str = typer.Option(..., "--hardware", "-H", help="Hardware profile ID or YAML file."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Model profile ID or file (default: the scenario's)."),
    scenario: str = typer.Option(..., "--scenario", "-s", help="Scenario ID or YAML file."),
    accelerators: Optional[int] = typer.Option(None, "--accelerators", "-n", help="Accelerators in the system (default: one scale-up domain)."),
    round_: Optional[str] = typer.Option(None, "--round", help="MLPerf round whose software preset to use, e.g. v5.1 (default: latest)."),
    isl: Optional[float] = typer.Option(None, "--isl", help="Override the mean input length, tokens."),
    osl: Optional[float] = typer.Option(None, "--osl", help="Override the mean output length, tokens."),
    trace: Optional[Path] = typer.Option(None, "--trace", help="CSV of (isl, osl) per request replacing the scenario's lengths."),
    tp: Optional[int] = typer.Option(None, "--tp", help="Fix tensor parallelism (else the round preset's recipe for this model and hardware, if any, else searched)."),
    ep: Optional[int] = typer.Option(None, "--ep", help="Fix expert parallelism (else searched)."),
    dp: Optional[int] = typer.Option(None, "--dp", help="Fix attention data parallelism within the TP group (else searched)."),
    pp: Optional[int] = typer.Option(None, "--pp", help="Fix pipeline parallelism (else searched)."),
    batch: Optional[float] = typer.Option(None, "--batch", help="Fix the decode batch per instance, sequences (else searched; the search places a Server/Interactive batch, a mean occupancy, where the tightest latency limit is met, so it need not be whole)."),
    enable: Optional[list[str]] = typer.Option(None, "--enable", help=_ENABLE_HELP),
    disable: Optional[list[str]] = typer.Option(None, "--disable", help="Turn an optimization off (repeatable)."),
    set_: Optional[list[str]] = typer.Option(None, "--set", metavar="KIND.PARAM=VALUE", help="Optimization parameter (repeatable), e.g. mtp.depth=2."),
    price: Optional[float] = typer.Option(None, "--price-per-hour", help="Override the price per accelerator-hour, US$."),
    tco_capex: Optional[float] = typer.Option(None, "--tco-capex", help="TCO mode: purchase price per accelerator incl. its system share, US$ (replaces the rental price)."),
    tco_years: float = typer.Option(4.0, "--tco-years", help="TCO mode: depreciation period, years."),
    tco_pue: float = typer.Option(1.3, "--tco-pue", help="TCO mode: data-centre power usage effectiveness."),
    tco_kwh: float = typer.Option(0.10, "--tco-usd-per-kwh", help="TCO mode: electricity price, US$/kWh."),
    fmt: OutputFormat = typer.Option(OutputFormat.table, "--format", help="table or json."),
    explain: bool = typer.Option(False, "--explain", help="Also print the per-operator tables of the decode step and of one prompt token."),
    qps: Optional[float] = typer.Option(None, "--qps", help="Predict at this load, requests/s for the whole system (Server/Interactive): tokens/s, occupancy, iteration time, TTFT/TPOT p50/p99, or the limit that breaks (exit 1)."),
    samples: Optional[int] = typer.Option(None, "--samples", help="With --qps: queries LoadGen issues (issue time = samples / qps) for the completed tokens/s; default the 600 s minimum run."),
    top: int = typer.Option(0, "--top", help="Also list the N best other configurations the search evaluated (layout and optimizations, best batch each, what stops it), 1-100."),
    dispatch: Optional[str] = typer.Option(None, "--dispatch", help=cli_products.DISPATCH_HELP),
    ttft_ms: cli_products.TtftMs = None,
    tpot_ms: cli_products.TpotMs = None,
    e2e_ms: cli_products.E2eMs = None,
    slo_percentile: cli_products.SloPercentile = None,
) -> None:
    """Predict the best operating point (searching unset layout flags) for one system."""
    from . import api, checks, report, tco, workloads

    if workloads.handles(model, scenario):  # text-to-video / recommendation: samples/s
        workloads.reject_llm_flags(round=round_, isl=isl, osl=osl, trace=trace, tp=tp, ep=ep, dp=dp, pp=pp, batch=batch,
                                   enable=enable, disable=disable, set=set_, price_per_hour=price, tco_capex=tco_capex,
                                   explain=explain, dispatch=dispatch, ttft_ms=ttft_ms, tpot_ms=tpot_ms, e2e_ms=e2e_ms,
                                   slo_percentile=slo_percentile)
        wpred = workloads.predict(hardware, model, scenario, accelerators)
        if fmt == OutputFormat.json:
            typer.echo(report.to_json(wpred.to_dict()))
        elif wpred.feasible:
            for table in workloads.tables(wpred.to_dict()):
                _console().print(table)
        if not wpred.feasible:
            raise InfeasibleError(wpred.reason)
        return
    params = checks.parse_param_overrides(set_ or [])
    if top and not 1 <= top <= 100:
        raise SpecError(f"--top must be in [1, 100] configurations (got {top})")
    if top and qps is not None:
        raise SpecError("--top lists capacity configurations; it does not combine with --qps")
    if tco_capex is not None:
        if price is not None:
            raise SpecError("give either --price-per-hour or --tco-capex, not both")
        checks.check_tco(tco_capex, tco_years, tco_pue, tco_kwh)
        price = tco.tco_usd_per_hour(catalog.load("hardware", hardware), tco_capex, tco_years, tco_pue, tco_kwh)
    pred = api.predict(hardware, model, scenario, accelerators, round=round_, isl=isl, osl=osl, trace=trace, tp=tp, ep=ep, dp=dp,
                       pp=pp, batch=batch, enable=enable or [], disable=disable or [],
                       params=params, price_per_hour=price, qps=qps, samples=samples, dispatch=dispatch,
                       slo=cli_products.slo_overrides(ttft_ms, tpot_ms, e2e_ms, slo_percentile))
    d = pred.to_dict()
    others = None
    if top:
        from .runners_up import runners_up

        others = runners_up(pred, top)
    if fmt == OutputFormat.json:
        if explain:
            d["explain"] = api.explain(pred)
            d["explain_prompt"] = api.explain_prompt(pred)
        if others is not None:
            d["runners_up"] = others
        typer.echo(report.to_json(d))
    elif pred.feasible:
        console = _console()
        for table in report.prediction_tables(d):
            console.print(table)
        if explain:
            console.print(report.explain_table(api.explain(pred)))
            prompt = api.explain_prompt(pred)
            if prompt is not None:
                console.print(report.explain_prompt_table(prompt))
        if others:
            console.print(report.runners_up_table(others, d.get("limits")))
    if not pred.feasible:
        raise InfeasibleError(pred.reason)


class TableJsonCsv(str, Enum):
    table = "table"
    json = "json"
    csv = "csv"


def _rows_csv(rows: list[dict]) -> str:
    import csv
    import io

    buf = io.StringIO()
    flat = [{k: (json.dumps(v) if isinstance(v, dict) else v) for k, v in r.items()} for r in rows]
    if flat:  # every row's columns, in the order first seen (a row without some leaves them empty)
        writer = csv.DictWriter(buf, fieldnames=list(dict.fromkeys(k for r in flat for k in r)))
        writer.writeheader()
        writer.writerows(flat)
    return buf.getvalue()


@app.command("pareto")
@handle_errors
@_writes("pareto", "force")
def pareto_cmd(
    hardware: str = typer.Option(..., "--hardware", "-H", help="Hardware profile ID or YAML file."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Model profile ID or file (default: the scenario's)."),
    scenario: str = typer.Option(..., "--scenario", "-s", help="Scenario ID or YAML file."),
    accelerators: Optional[int] = typer.Option(None, "--accelerators", "-n", help="Accelerators in the system."),
    round_: Optional[str] = typer.Option(None, "--round", help="MLPerf round preset (default: latest)."),
    enable: Optional[list[str]] = typer.Option(None, "--enable", help=_ENABLE_HELP),
    disable: Optional[list[str]] = typer.Option(None, "--disable", help="Turn an optimization off (repeatable)."),
    fmt: TableJsonCsv = typer.Option(TableJsonCsv.table, "--format", help="table, json or csv."),
    out: Optional[Path] = typer.Option(None, "--out", help="Also write the frontier to this file (.csv or .json)."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Draw the frontier to this PNG file."),
    force: bool = typer.Option(False, "--force", help=_FORCE_HELP),
    dispatch: Optional[str] = typer.Option(None, "--dispatch", help=cli_products.DISPATCH_HELP),
    ttft_ms: cli_products.TtftMs = None,
    tpot_ms: cli_products.TpotMs = None,
    e2e_ms: cli_products.E2eMs = None,
    slo_percentile: cli_products.SloPercentile = None,
) -> None:
    """Tokens/s per accelerator vs tokens/s per user over every configuration that fits (Pareto frontier)."""
    from . import api, pareto, report

    if out is not None:
        files.check_output_path(out, flag="--out", suffixes=(".csv", ".json"))
    if plot is not None:
        files.check_output_path(plot, flag="--plot", suffixes=PLOT_SUFFIXES, image=True)
    pred = api.predict(hardware, model, scenario, accelerators, round=round_, enable=enable or [],
                       disable=disable or [], dispatch=dispatch,
                       slo=cli_products.slo_overrides(ttft_ms, tpot_ms, e2e_ms, slo_percentile))
    points = pareto.frontier_points(pred)
    if not points:
        raise InfeasibleError(pred.reason or "no configuration fits in memory")
    text = report.to_json(points) if fmt == TableJsonCsv.json else _rows_csv(points)
    if fmt == TableJsonCsv.table:
        limits = pred.to_dict()["limits"]
        pct = report.percentile_label(limits)  # the scenario's percentile
        cols = ("tokens/s/user", "tokens/s/accelerator", f"TTFT {pct} ms", f"TPOT {pct} ms", "tp", "pp", "ep", "dp",
                "batch", "MTP", "disagg", "meets limits")
        rows = [(p["tokens_per_s_per_user"], p["tokens_per_s_per_accelerator"], p["ttft_p99_s"] * 1e3,
                 p["tpot_p99_s"] * 1e3, p["tp"], p["pp"], p["ep"], p["dp"], p["batch"], p["mtp_depth"],
                 "yes" if p["disaggregated"] else "no", "yes" if p["meets_limits"] else p["reason"]) for p in points]
        _console().print(_table(f"Pareto frontier: {pred.inputs.hardware_id} × {pred.accelerators}, {pred.inputs.model_id}, "
                                f"{pred.inputs.scenario_id}{report.limits_suffix(limits)}", cols, rows))
    else:
        typer.echo(text.rstrip("\n"))
    if out is not None:
        files.write_atomic(out, report.to_json(points) if out.suffix.lower() == ".json" else _rows_csv(points))
    if plot is not None:
        op = pred.metrics if pred.feasible else None
        pareto.plot(points, plot, f"{pred.inputs.model_id} · {pred.inputs.scenario_id} · {pred.inputs.hardware_id} × "
                    f"{pred.accelerators}", op)


@app.command("ablate")
@handle_errors
@_writes("ablate", "force")
def ablate_cmd(
    hardware: str = typer.Option(..., "--hardware", "-H", help="Hardware profile ID or YAML file."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Model profile ID or file (default: the scenario's)."),
    scenario: str = typer.Option(..., "--scenario", "-s", help="Scenario ID or YAML file."),
    accelerators: Optional[int] = typer.Option(None, "--accelerators", "-n", help="Accelerators in the system."),
    round_: Optional[str] = typer.Option(None, "--round", help="Round preset whose optimizations are ablated (default: latest)."),
    from_round: Optional[str] = typer.Option(None, "--from-round", help="Waterfall from this round's software to --round's."),
    lever: Optional[list[str]] = typer.Option(None, "--lever", help="Optimizations to ablate (default: the round's)."),
    fmt: TableJsonCsv = typer.Option(TableJsonCsv.table, "--format", help="table, json or csv."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Draw the waterfall to this PNG file."),
    force: bool = typer.Option(False, "--force", help=_FORCE_HELP),
    ttft_ms: cli_products.TtftMs = None,
    tpot_ms: cli_products.TpotMs = None,
    e2e_ms: cli_products.E2eMs = None,
    slo_percentile: cli_products.SloPercentile = None,
) -> None:
    """Add optimizations one at a time (waterfall) and remove them one at a time (leave-one-out)."""
    from . import ablation, report

    if plot is not None:
        files.check_output_path(plot, flag="--plot", suffixes=PLOT_SUFFIXES, image=True)
    slo = cli_products.slo_overrides(ttft_ms, tpot_ms, e2e_ms, slo_percentile)
    if from_round:
        result = ablation.round_waterfall(hardware, model, scenario, accelerators, from_round=from_round,
                                          to_round=round_ or "latest", slo=slo)
    else:
        result = ablation.waterfall(hardware, model, scenario, accelerators, round=round_, levers=lever, slo=slo)
    rows, loo = result.rows, result.leave_one_out
    if fmt == TableJsonCsv.json:
        typer.echo(report.to_json(result.to_dict()))
    elif fmt == TableJsonCsv.csv:
        typer.echo(_rows_csv(rows + loo).rstrip("\n"))
    else:
        pct = report.percentile_label(result.limits)
        cols = ("step", "tokens/s/accelerator", "gain ×", "$/M tokens", f"TTFT {pct} ms", f"TPOT {pct} ms", "layout")
        def fmt_row(r):
            c = r["config"]
            lay = f"tp{c['tp']} pp{c['pp']} ep{c['ep']} dp{c['dp']} B{c['batch']:.0f}" if r["feasible"] else "infeasible"
            lay += f" mtp{c['mtp_depth']}" if c.get("mtp_depth") else ""
            lay += " disagg" if c.get("disaggregated") else ""
            ms = lambda v: v * 1e3 if v is not None else None  # noqa: E731
            return (r["step"], r["tokens_per_s_per_accelerator"], r["gain"], r["usd_per_million_tokens"],
                    ms(r["ttft_s"]), ms(r["tpot_s"]), lay)
        console = _console()
        console.print(_table("waterfall (each step re-searches layout, batch and MTP depth)"
                             + report.limits_suffix(result.limits), cols, [fmt_row(r) for r in rows]))
        if loo:
            console.print(_table("leave one out (gain × = full / without)", cols, [fmt_row(r) for r in loo]))
        for kind, why in result.skipped.items():
            console.print(f"skipped {kind}: {why}")
    if plot is not None:
        ablation.plot(rows, plot, f"{model or scenario} · {hardware} — waterfall")


@app.command("curve")
@handle_errors
@_writes("curve", "force")
def curve_cmd(
    hardware: str = typer.Option(..., "--hardware", "-H", help="Hardware profile ID or YAML file."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Model profile ID or file (default: the scenario's)."),
    scenario: str = typer.Option(..., "--scenario", "-s", help="Server or Interactive scenario ID or YAML file."),
    accelerators: Optional[int] = typer.Option(None, "--accelerators", "-n", help="Accelerators in the system."),
    round_: Optional[str] = typer.Option(None, "--round", help="MLPerf round preset (default: latest)."),
    qps: Optional[str] = typer.Option(None, "--qps", help="Loads, requests/s for the whole system, comma-separated (default: --points loads evenly spaced up to the capacity)."),
    points: int = typer.Option(10, "--points", help="Without --qps: this many loads up to the capacity's rate, 1-200."),
    enable: Optional[list[str]] = typer.Option(None, "--enable", help=_ENABLE_HELP),
    disable: Optional[list[str]] = typer.Option(None, "--disable", help="Turn an optimization off (repeatable)."),
    dispatch: Optional[str] = typer.Option(None, "--dispatch", help=cli_products.DISPATCH_HELP),
    ttft_ms: cli_products.TtftMs = None,
    tpot_ms: cli_products.TpotMs = None,
    e2e_ms: cli_products.E2eMs = None,
    slo_percentile: cli_products.SloPercentile = None,
    fmt: TableJsonCsv = typer.Option(TableJsonCsv.table, "--format", help="table, json or csv."),
    out: Optional[Path] = typer.Option(None, "--out", help="Also write the points to this file (.csv or .json)."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Draw TTFT and TPOT against the load to this PNG file."),
    force: bool = typer.Option(False, "--force", help=_FORCE_HELP),
) -> None:
    """Latency and throughput against offered load: the capacity-best configuration run at each load."""
    from . import curve, report

    if out is not None:
        files.check_output_path(out, flag="--out", suffixes=(".csv", ".json"))
    if plot is not None:
        files.check_output_path(plot, flag="--plot", suffixes=PLOT_SUFFIXES, image=True)
    c = curve.curve(hardware, model, scenario, accelerators, round=round_, enable=enable or [],
                         disable=disable or [], dispatch=dispatch, qps=cli_products._list(qps, float, "--qps"),
                         points=points, slo=cli_products.slo_overrides(ttft_ms, tpot_ms, e2e_ms, slo_percentile))
    d = c.to_dict()
    if fmt == TableJsonCsv.json:
        typer.echo(report.to_json(d))
    elif fmt == TableJsonCsv.csv:
        typer.echo(_rows_csv(d["points"]).rstrip("\n"))
    else:
        pct = report.percentile_label(d["limits"])
        rnd = lambda v, nd, scale=1.0: None if v is None else round(v * scale, nd)  # noqa: E731
        ms = lambda v, nd=1: rnd(v, nd, 1e3)  # noqa: E731
        cols = ("requests/s", "of capacity", "tokens/s", "tokens/s/accelerator", "occupancy", "iteration ms",
                "TTFT p50 ms", f"TTFT {pct} ms", "TPOT p50 ms", f"TPOT {pct} ms", "meets limits")
        rows = [(round(r["requests_per_s"], 2), f"{r['share_of_capacity']:.0%}", rnd(r["tokens_per_s"], 0),
                 rnd(r["tokens_per_s_per_accelerator"], 1), rnd(r["occupancy"], 1), ms(r["iteration_s"], 2), ms(r["ttft_p50_s"]),
                 ms(r["ttft_s"]), ms(r["tpot_p50_s"], 2), ms(r["tpot_s"], 2), "yes" if r["meets_limits"] else r["limit"])
                for r in d["points"]]
        cfg = d["config"]
        title = (f"load curve: {d['hardware']} × {d['accelerators']}, {d['model']}, {d['scenario']} · tp{cfg['tp']} "
                 f"pp{cfg['pp']} ep{cfg['ep']} dp{cfg['dp']} ×{cfg.get('replicas', 1)} · capacity "
                 f"{d['capacity_requests_per_s']:.2f} requests/s{report.limits_suffix(d['limits'])}")
        _console().print(_table(title, cols, rows))
    if out is not None:
        files.write_atomic(out, report.to_json(d) if out.suffix.lower() == ".json" else _rows_csv(d["points"]))
    if plot is not None:
        curve.plot(c, plot, f"{d['model']} · {d['scenario']} · {d['hardware']} × {d['accelerators']}")


@app.command("validate")
@handle_errors
@_writes("validate", "force")
def validate_cmd(
    data: Optional[Path] = typer.Option(None, "--data", help="CSV of published results (default: the bundled MLPerf rows)."),
    fmt: TableJsonCsv = typer.Option(TableJsonCsv.table, "--format", help="table, json or csv."),
    out: Optional[Path] = typer.Option(None, "--out", help="Write the report to this file instead of stdout."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Draw predicted vs published (log-log) to this .png, .svg or .pdf file (with --at-load: TPOT p50 and TTFT p99 against the measured)."),
    at_load: bool = typer.Option(False, "--at-load", help="Predict Server/Interactive rows at their measured load (operating-points CSV columns) and report latency errors."),
    run_engine: bool = typer.Option(False, "--run-engine", help="With --at-load: predict each run matched in data/mlperf_engine_settings.csv with its own engine settings (batch cap, token budget, chunking, ADP gate, graph sizes, stream interval) and its own TP/PP/EP/attention-DP layout instead of the round preset's engine and the search's layout."),
    force: bool = typer.Option(False, "--force", help=_FORCE_HELP),
) -> None:
    """Predict every row of an MLPerf-style CSV and report the signed errors and their summary."""
    from . import accuracy, workloads

    if out is not None:
        files.check_output_path(out, flag=f"--out (--format {fmt.value})", suffixes=REPORT_SUFFIX[fmt.value])
    if plot is not None:
        files.check_output_path(plot, flag="--plot", suffixes=(".png", ".svg", ".pdf"), image=True)
    data = _input_csv(data, "--data")
    if run_engine and not at_load:
        raise SpecError("--run-engine needs --at-load")
    if at_load:
        from . import at_load as al

        result = al.validate(data or al.bundled_data(), run_settings=run_engine)
        if fmt == TableJsonCsv.json:
            text = json.dumps(result, indent=2, default=float)
        elif fmt == TableJsonCsv.csv:  # one line per row
            text = al.rows_csv(result).rstrip("\n")
        else:
            text = "\n".join(f"{k}: {v}" for k, v in result.items() if k != "per_row")
        if out is not None:
            accuracy.write_text(out, text + "\n")
        else:
            typer.echo(text)
        if plot is not None:
            al.plot(result, plot)
        return

    if data is not None and workloads.is_metric_csv(data):  # rows in samples/s or latency (non-LLM, Qwen3-VL)
        if plot is not None:
            raise SpecError("--plot is not available for samples/s rows")
        rows_m, summary = workloads.validate_metric_csv(data)
        text = workloads.render_validation(rows_m, summary, fmt.value)
        if out is not None:
            accuracy.write_text(out, text)
        else:
            typer.echo(text.rstrip("\n"))
        return
    report = accuracy.validate(accuracy.load_rows(data or accuracy.bundled_data()))
    text = report.render(fmt.value)
    if out is not None:
        accuracy.write_text(out, text)
    else:
        typer.echo(text.rstrip("\n"))
    if plot is not None:
        accuracy.plot(report, plot)


@app.command("calibrate")
@handle_errors
@_writes("calibrate", "force", "in_place")
def calibrate_cmd(
    data: Optional[Path] = typer.Option(None, "--data", help="CSV of published results (default: the bundled MLPerf rows)."),
    hardware: Optional[list[str]] = typer.Option(None, "--hardware", help="Fit only these hardware IDs (repeatable); round presets stay unchanged."),
    out: Optional[Path] = typer.Option(None, "--out", help="Write calibrated copies of the profiles and presets here (never in place)."),
    in_place: bool = typer.Option(False, "--in-place", help="Overwrite the profiles and presets themselves."),
    cv: bool = typer.Option(False, "--cv", help="Also report leave-one-round-out, leave-one-hardware-out and leave-one-model-out error."),
    fmt: OutputFormat = typer.Option(OutputFormat.table, "--format", help="table or json."),
    force: bool = typer.Option(False, "--force", help="Replace files in --out that are not earlier calibrate outputs."),
    operating_points: Optional[Path] = typer.Option(None, "--operating-points", help="Also fit the model's mean TPOT at each measured operating point of this CSV (columns of data/mlperf_operating_points.csv)."),
    bundled_operating_points: bool = typer.Option(False, "--bundled-operating-points", help="Also fit the bundled operating points (data/mlperf_operating_points.csv)."),
    parameters: Optional[str] = typer.Option(None, "--parameters", help="Comma-separated efficiency fields to fit per hardware (default: the shipped set; each must have a documented range, see infersim/accuracy/params.py)."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="With --cv: draw each fold kind's held-out errors (predicted/published against published tokens/s) to this .png, .svg or .pdf file."),
    from_defaults: bool = typer.Option(False, "--from-defaults", help="Start every fitted value from its documented default instead of the profiles' current values, with the cross-validation folds' iteration budget (how the shipped values were fitted; minutes, not seconds)."),
    max_nfev: Optional[int] = typer.Option(None, "--max-nfev", help="Optimizer iterations (scipy max_nfev, 1-1000; default: calibrate's own, or the folds' budget with --from-defaults). A larger budget runs the fit towards convergence; the table says whether it stopped at the budget."),
    jacobian: Optional[str] = typer.Option(None, "--jacobian", help="secant (one finite difference, then secant updates; by default with a fresh difference every third update under --from-defaults) or difference (a finite difference at every step: slower, how the shipped values were fitted)."),
) -> None:
    """Fit the named efficiency parameters (hardware) and maturity factors (round presets) to the data.

    Nothing is written unless --out, --in-place or --plot is given.
    """
    from . import accuracy

    if out is not None and in_place:
        raise SpecError("give either --out DIR or --in-place, not both")
    if max_nfev is not None and not 1 <= max_nfev <= 1000:
        raise SpecError(f"--max-nfev must be an integer in [1, 1000] optimizer iterations (got {max_nfev})")
    if jacobian is not None and jacobian not in accuracy.JACOBIAN_KINDS:
        raise SpecError(f"--jacobian must be one of {', '.join(accuracy.JACOBIAN_KINDS)} (got {jacobian!r})")
    if plot is not None:
        if not cv:
            raise SpecError("--plot draws the cross-validation: give --cv with it")
        files.check_output_path(plot, flag="--plot", suffixes=(".png", ".svg", ".pdf"), image=True)
    if out is not None:
        checks.check_calibrate_out(out)
        accuracy.check_out_dir(out)  # refuse before a long fit, not after
    rows = accuracy.load_rows(_input_csv(data, "--data") or accuracy.bundled_data())
    with accuracy.for_stderr() as progress:
        ops = _input_csv(operating_points, "--operating-points") or (True if bundled_operating_points else None)
        # the start and the iteration budget: calibrate's own unless --from-defaults / --max-nfev set them
        fit_kwargs = {"start": "default", "max_nfev": accuracy.CV_MAX_NFEV} if from_defaults else {}
        if max_nfev is not None:
            fit_kwargs["max_nfev"] = max_nfev
        if jacobian is not None:
            fit_kwargs["jacobian"] = jacobian
        res = accuracy.calibrate(rows, hardware or None, cv=cv, progress=progress, operating_points=ops,
                                 parameters=accuracy.parse_parameters(parameters) or accuracy.DEFAULT_PARAMETERS,
                                 **fit_kwargs)
    typer.echo(json.dumps(res.to_dict(), indent=2, default=str) if fmt == OutputFormat.json else res.to_table())
    if out is not None or in_place:
        for path in accuracy.write(res, None if in_place else out, in_place=in_place):
            typer.echo(f"wrote {path}", err=True)
    if plot is not None and res.cv:
        typer.echo(f"wrote {accuracy.plot_cv(res.cv, plot)}", err=True)


# ---- sweep and plan: bodies in cli_products, rendering here ---------------------------------------
@app.command("sweep")
@handle_errors
@_writes("sweep")
@functools.wraps(cli_products.sweep_cmd)
def sweep_cmd(**kwargs) -> None:
    if kwargs.get("out") is not None:
        files.check_output_path(kwargs["out"], flag="--out", suffixes=(".parquet", ".csv"))
    cli_products.sweep_cmd(**kwargs)


@app.command("plan")
@handle_errors
@_writes("plan")
@functools.wraps(cli_products.plan_cmd)
def plan_cmd(**kwargs) -> None:
    from . import report

    fmt, out = kwargs["fmt"], kwargs["out"]
    if kwargs.get("price") is not None:
        checks.check_price("--price-per-hour", kwargs["price"])
    if out is not None:
        files.check_output_path(out, flag="--out", suffixes=(".json", ".csv"))
    if kwargs.get("plot") is not None:
        files.check_output_path(kwargs["plot"], flag="--plot", suffixes=PLOT_SUFFIXES, image=True)
    rows = cli_products.plan_cmd(**kwargs)
    if fmt == "json":
        typer.echo(report.to_json(rows))
    elif fmt == "csv":
        typer.echo(_rows_csv([_flat(r) for r in rows]).rstrip("\n"))
    else:
        # latencies at the target load where predicted (Server / Interactive), else at capacity
        at_target = any(r.get("at_target") for r in rows)
        limits = next((r["limits"] for r in rows if r.get("limits")), None)
        pct = report.percentile_label(limits)
        cols = ("hardware", "accelerators", "domains", "layout", "capacity tokens/s", "headroom %",
                f"TTFT {pct} ms at target" if at_target else f"TTFT {pct} ms",
                f"TPOT {pct} ms at target" if at_target else f"TPOT {pct} ms", "$/hour", "$/month", "$/M out",
                "$/M blended")
        table_rows = []
        for r in rows:
            if not r["feasible"]:
                table_rows.append((r["hardware"], None, None, r["reason"], *([None] * 8)))
                continue
            lay = r["layout"]
            table_rows.append((r["hardware"], r["accelerators"], r["scale_up_domains"],
                               f"tp{lay['tp']} pp{lay['pp']} ep{lay['ep']} dp{lay['dp']} ×{lay['replicas']}",
                               round(r["capacity_tokens_per_s"]), round(100 * r["headroom"], 1),
                               *(round(1e3 * _at_target_or_capacity(r, k), 1) for k in ("ttft_s", "tpot_s")),
                               r["usd_per_hour"], round(r["usd_per_month"]), r["usd_per_million_tokens"],
                               r["usd_per_million_blended_tokens"]))
        _console().print(_table("capacity plan (cheapest first)" + report.limits_suffix(limits), cols, table_rows))
    if out is not None:
        files.write_atomic(out, report.to_json(rows) if out.suffix.lower() == ".json" else _rows_csv([_flat(r) for r in rows]))
    if not any(r["feasible"] for r in rows):
        raise InfeasibleError("no candidate meets the target within the limits: "
                              + "; ".join(f"{r['hardware']}: {r['reason']}" for r in rows))


def _at_target_or_capacity(row: dict, key: str) -> float:
    """A plan row's latency at its target load where that prediction gave one, else at capacity."""
    value = (row.get("at_target") or {}).get(key)
    return value if isinstance(value, (int, float)) and math.isfinite(value) else row[key]


def _flat(row: dict) -> dict:
    """A plan row with its nested layout, the figures at the target load and the latency limits
    flattened into columns (for CSV)."""
    flat = {k: v for k, v in row.items() if not isinstance(v, (dict, list))}
    flat.update({f"layout_{k}": v for k, v in row.get("layout", {}).items()})
    flat["optimizations"] = ",".join(row.get("optimizations", []))
    flat.update({f"at_target_{k}": v for k, v in (row.get("at_target") or {}).items()})
    flat.pop("limits", None)  # None for Offline: the limit columns below are empty then
    flat.update({f"limit_{k}": (row.get("limits") or {}).get(k) for k in LIMIT_FIELDS})
    return flat


def main() -> None:
    """Console-script entry point (``infersim``)."""
    app(prog_name="infersim")


__all__ = ["app", "main", "handle_errors"]
