"""Validation at the measured load: predict each MLPerf Server/Interactive run at the arrival rate
the submitter actually scheduled and compare its latencies.

Input: a CSV with at least ``version, submitter, system, benchmark, scenario, total_accelerators,
scheduled_samples_per_s, tokens_per_sample, tpot_p50_ms, ttft_p50_ms, ttft_p99_ms, tpot_p99_ms``
(the columns of ``data/mlperf_operating_points.csv``). Hardware: the row's ``hardware`` column
where filled, else the accelerator / system name matched by ``accuracy.oppoints.HARDWARE_RULES``. Model: the
benchmark name without its accuracy suffix (``llama2-70b-99.9`` → ``llama2-70b``).

Per row: the capacity-best aggregated configuration of the row's round preset
(``api.predict(..., disable=["disagg"])``, shared by rows with the same system; for a run whose
config says it ran disaggregated, the capacity-best disaggregated one, or with ``--run-engine`` the
run's own pools, run by ``disagg_load.operating_point``) is run at
``scheduled_samples_per_s`` (``scheduler.operating_point``) with the scenario's output lengths
scaled to the run's own mean, ``tokens_per_sample`` (``WorkloadStats.with_output_mean``: NVIDIA's llama2-70b
runs generate 274 tokens per sample, AMD's 300, the scenario's reference 294). Errors: TPOT p50 and p99 as signed
percentages, TTFT p99 in seconds. Rates: the steady-state output rate is qps × mean OSL; loadgen's
*completed* rate divides the tokens by the issue time plus the last query's latency,
completed = steady × issue / (issue + latency), issue = samples_run / qps, latency = predicted mean
TTFT + (OSL − 1) × mean TPOT (``scheduler.operating_point``).
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from .accuracy.oppoints import bundled_data, hardware_id, load, model_id  # noqa: F401 (bundled_data: the CLI's default file)
from .errors import SpecError
from .run_settings import (RUN_KEY, _num, apply_run, load_engine_settings, run_engine,  # noqa: F401 (re-exported)
                           run_layout)


class _Systems:
    """Capacity-best configuration per (preset, hardware, model, scenario, accelerators, disaggregated):
    aggregated, or disaggregated for runs that were."""

    def __init__(self):
        self.cache: dict[tuple, Any] = {}

    def get(self, key):
        if key not in self.cache:
            from . import api

            preset, hw, model, scenario, n, disagg = key
            flag = {"enable": ["disagg"]} if disagg else {"disable": ["disagg"]}
            try:
                self.cache[key] = api.predict(hw, model, scenario, n, round=preset, **flag)
            except SpecError as exc:
                self.cache[key] = f"bad input: {exc}"
        return self.cache[key]


def predict_row(cols: dict[str, str], systems: _Systems, settings: dict | None = None,
                known_runs: dict | None = None) -> dict[str, Any]:
    """One row's prediction at its scheduled load and its errors (or a reason). ``settings``: runs'
    engine settings (``load_engine_settings``); a matched run is predicted with its own engine
    (``run_engine``) on its own layout where given (``run_layout``). A run found in ``settings`` or
    ``known_runs`` is flagged when it ran disaggregated."""
    from .graph import Layout
    from .scheduler import operating_point
    from .serving import WorkloadStats
    from .accuracy.data import resolve_preset

    out: dict[str, Any] = {k: cols.get(k, "") for k in ("version", "submitter", "system", "benchmark", "scenario")}
    scen = cols.get("scenario", "").strip().lower()
    qps, n = _num(cols.get("scheduled_samples_per_s")), _num(cols.get("total_accelerators"))
    meas = {k: _num(cols.get(k)) for k in ("tpot_p50_ms", "ttft_p50_ms", "ttft_p99_ms", "tpot_p99_ms")}
    hw = hardware_id(cols)
    out.update(hardware=hw, model=model_id(cols.get("benchmark", "")), qps=qps, measured=meas, reason="")
    if scen not in ("server", "interactive"):
        out["reason"] = f"scenario {cols.get('scenario')!r} has no arrival rate"
    elif hw is None:
        out["reason"] = f"no hardware profile for accelerator {cols.get('accelerator', '')!r}"
    elif qps is None or n is None or None in meas.values():
        out["reason"] = "missing scheduled rate, accelerator count or latency columns"
    if out["reason"]:
        return out
    try:
        preset = resolve_preset(cols["version"].strip())
    except SpecError as exc:
        out["reason"] = f"bad input: {exc}"
        return out
    key = tuple(cols.get(k, "").strip() for k in RUN_KEY)
    run = (settings or {}).get(key)
    out["run_engine"], out["run_layout"] = run is not None, False
    # flagged from the run's config whether or not its settings are used (``known_runs``)
    known = run if run is not None else (known_runs or {}).get(key)
    disagg = bool(known and known.get("serving_mode", "").startswith("disaggregated"))
    out["disaggregated_run"] = disagg
    pred = systems.get((preset, hw, out["model"], f"mlperf-{out['model']}-{scen}", int(n), disagg))
    if isinstance(pred, str) or not pred.feasible:
        out["reason"] = pred if isinstance(pred, str) else f"infeasible at capacity: {pred.reason}"
        return out
    c = pred.config
    stats = WorkloadStats.from_workload(pred.inputs.scenario.workload, pred.inputs.model).with_output_mean(
        _num(cols.get("tokens_per_sample")))
    # KV capacity of the chosen layout: the search's max batch at that point
    samples = _num(cols.get("samples_run"))
    plan = pred.plan
    if c.get("disaggregated"):
        return _disaggregated(out, plan, c, run, stats, pred.inputs.scenario, qps, int(n), samples, meas, cols)
    cfg = {k: c[k] for k in ("tp", "ep", "dp", "pp", "replicas", "mtp_depth", "max_batch")}
    if run is not None:
        plan, own = apply_run(plan, run, stats, int(n))
        out["run_layout"] = own is not None
        if own is not None:
            cfg.update(own)
    ok, why, m = operating_point(plan, Layout(tp=cfg["tp"], pp=cfg["pp"], ep=cfg["ep"], dp=cfg["dp"]), cfg["replicas"],
                                 stats, pred.inputs.scenario, qps, cfg["max_batch"], n / (cfg["tp"] * cfg["pp"]), samples)
    return _record(out, {k: v for k, v in cfg.items() if k != "max_batch"}, ok, why, m, samples, meas, cols)


def _record(out: dict[str, Any], config: dict, ok: bool, why: str, m: dict, samples, meas: dict, cols: dict,
            **extra) -> dict[str, Any]:
    """The row's prediction at its load (``m``: an ``operating_point``'s metrics) and its errors against
    the measured latencies, or the saturated reason; ``extra`` keys go beside the prediction."""
    out.update(config=config, meets_limits=ok, limit=why,
               predicted={"tpot_p50_ms": 1e3 * m["tpot_p50_s"], "ttft_p50_ms": 1e3 * m["ttft_p50_s"],
                          "ttft_p99_ms": 1e3 * m["ttft_s"], "tpot_p99_ms": 1e3 * m["tpot_s"],
                          "occupancy_per_rank": m["occupancy_per_rank"], "iteration_ms": 1e3 * m["iteration_s"]},
               **extra, steady_tokens_per_s=m["tokens_per_s"],
               completed_tokens_per_s=m["completed_tokens_per_s"] if samples else None,
               measured_completed_tokens_per_s=_num(cols.get("completed_tokens_per_s")))
    p = out["predicted"]
    if not all(math.isfinite(v) for v in p.values()):
        out["reason"] = f"saturated at the measured load: {out['limit']}"
        return out
    out["tpot_p50_ape"] = 100 * abs(p["tpot_p50_ms"] / meas["tpot_p50_ms"] - 1)
    out["tpot_p99_ape"] = 100 * abs(p["tpot_p99_ms"] / meas["tpot_p99_ms"] - 1)
    out["ttft_p99_error_s"] = (p["ttft_p99_ms"] - meas["ttft_p99_ms"]) / 1e3
    return out


def _disaggregated(out, plan, c, run, stats, scenario, qps, n, samples, meas, cols) -> dict[str, Any]:
    """A disaggregated run at its load (``disagg_load.operating_point``): its own prefill and decode
    pools where ``run`` (its engine settings) gives them (``run_disagg``), else the capacity-best
    disaggregated configuration of the round preset."""
    from . import disagg_load
    from .run_settings import run_disagg

    own = run_disagg(plan, run, stats, n) if run is not None else None
    if own is not None:
        plan, dep = own
        dec, d, pre, p, b_max = dep["decode"], dep["decode_workers"], dep["prefill"], dep["prefill_workers"], dep["max_batch"]
        out["run_layout"] = True
    else:
        (dec, d, pre, p), b_max = disagg_load.deployment(c), c["max_batch"]
    ok, why, m = disagg_load.operating_point(plan, dec, d, pre, p, stats, scenario, qps, b_max, n, samples)
    lay = lambda x: {k: int(getattr(x, k)) for k in ("tp", "pp", "ep", "dp")}  # noqa: E731
    config = {**lay(dec), "decode_workers": d, "prefill_workers": p, "prefill_layout": lay(pre),
              "mtp_depth": c.get("mtp_depth", 0)}
    return _record(out, config, ok, why, m, samples, meas, cols, prefill_utilization=m["prefill_utilization"])


def validate(path, run_settings: bool = False) -> dict[str, Any]:
    """Per-row results and the summary (medians over the rows that were predicted; also over the
    runs that were not disaggregated, the ``*_aggregated_runs`` figures).
    ``run_settings``: predict each run matched in ``data/mlperf_engine_settings.csv`` with its own
    engine settings (``run_engine``) and layout (``run_layout``), else the round preset's engine on
    the search's capacity-best layout."""
    systems = _Systems()
    known = load_engine_settings()  # the runs' configs: flags disaggregated runs in either mode
    settings = known if run_settings else {}
    rows = [predict_row(r, systems, settings, known) for r in load(path)]
    done = [r for r in rows if not r["reason"]]
    med = lambda xs: statistics.median(xs) if xs else None  # noqa: E731
    agg = [r for r in done if not r.get("disaggregated_run")]
    return {
        "rows_with_run_engine": sum(1 for r in done if r.get("run_engine")),
        "rows_with_run_layout": sum(1 for r in done if r.get("run_layout")),
        "disaggregated_runs": len(done) - len(agg),
        "tpot_p50_median_ape_aggregated_runs": med([r["tpot_p50_ape"] for r in agg]),
        "ttft_p99_median_abs_error_s_aggregated_runs": med([abs(r["ttft_p99_error_s"]) for r in agg]),
        "rows": len(rows), "predicted_rows": len(done),
        "skipped": {k: sum(1 for r in rows if r["reason"].startswith(k)) for k in
                    ("scenario", "no hardware", "missing", "infeasible", "saturated", "bad input")},
        "rows_over_a_limit_at_load": sum(1 for r in done if not r["meets_limits"]),
        "tpot_p50_median_ape": med([r["tpot_p50_ape"] for r in done]),
        "ttft_p99_median_abs_error_s": med([abs(r["ttft_p99_error_s"]) for r in done]),
        "tpot_p99_median_ape": med([r["tpot_p99_ape"] for r in done]),
        "completed_over_measured_median": med([r["completed_tokens_per_s"] / r["measured_completed_tokens_per_s"]
                                               for r in done if r["completed_tokens_per_s"]
                                               and r["measured_completed_tokens_per_s"]]),
        "per_row": rows,
    }


ROW_COLUMNS = ("version", "submitter", "system", "benchmark", "scenario", "hardware", "model", "qps",
               "disaggregated_run", "run_engine", "run_layout", "meets_limits", "limit", "reason")
"""Per-row columns of ``rows_csv`` before the measured / predicted latencies and the errors."""
LATENCY_KEYS = ("tpot_p50_ms", "tpot_p99_ms", "ttft_p50_ms", "ttft_p99_ms")


def rows_csv(result: dict[str, Any]) -> str:
    """``validate``'s per-row results as CSV: identity, flags, measured and predicted latencies (ms),
    the errors (TPOT %, TTFT p99 s); blank where a row was not predicted."""
    import csv
    import io

    cols = [*ROW_COLUMNS, *(f"measured_{k}" for k in LATENCY_KEYS), *(f"predicted_{k}" for k in LATENCY_KEYS),
            "tpot_p50_ape", "tpot_p99_ape", "ttft_p99_error_s"]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in result["per_row"]:
        flat = {k: r.get(k, "") for k in ROW_COLUMNS}
        for side in ("measured", "predicted"):
            vals = r.get(side) or {}
            flat.update({f"{side}_{k}": vals.get(k, "") for k in LATENCY_KEYS})
        flat.update({k: r.get(k, "") for k in ("tpot_p50_ape", "tpot_p99_ape", "ttft_p99_error_s")})
        w.writerow({k: ("" if v is None else v) for k, v in flat.items()})
    return buf.getvalue()


def plot(result: dict[str, Any], path) -> Any:
    """Predicted against measured TPOT p50 (ms) and TTFT p99 (s) of every predicted row at its load,
    log-log, one colour per model, disaggregated runs as open markers; y = x with ±10 % and ±25 %
    bands. The file type follows the suffix (.png, .svg, .pdf); written atomically."""
    import io

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from .accuracy.plot import _plot_target, identity_bands
    from .report import write_atomic

    path, kind = _plot_target(path)
    done = [r for r in result["per_row"] if not r["reason"]]
    fig = Figure(figsize=(11, 5.2), dpi=120)
    FigureCanvasAgg(fig)
    import matplotlib

    cmap = matplotlib.colormaps["tab10"]
    models = sorted({r["model"] for r in done})
    panels = (("tpot_p50_ms", 1.0, "TPOT p50, ms", f"median error {result['tpot_p50_median_ape'] or 0:.1f} %"),
              ("ttft_p99_ms", 1e-3, "TTFT p99, s", f"median |error| {result['ttft_p99_median_abs_error_s'] or 0:.3f} s"))
    for k, (key, scale, label, note) in enumerate(panels):
        ax = fig.add_subplot(1, 2, k + 1)
        pts = [(r["measured"][key] * scale, r["predicted"][key] * scale, r) for r in done]
        vals = [v for m, p, _ in pts for v in (m, p) if v > 0]
        lo, hi = (min(vals) / 1.5, max(vals) * 1.5) if vals else (1e-3, 1.0)
        identity_bands(ax, lo, hi)
        for gi, model in enumerate(models):
            color = cmap(gi % 10)
            for disagg in (False, True):
                sel = [(m, p) for m, p, r in pts if r["model"] == model and bool(r.get("disaggregated_run")) == disagg
                       and m > 0 and p > 0]
                if sel:
                    ax.scatter([m for m, _ in sel], [p for _, p in sel], s=22 if disagg else 16,
                               facecolors="none" if disagg else color, edgecolors=color, linewidths=0.9,
                               label=None if disagg else model)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_xlabel(f"measured {label}")
        ax.set_ylabel(f"predicted {label}")
        ax.set_title(f"{label} at the measured load: {note}", fontsize=9)
        ax.grid(True, which="both", lw=0.3, alpha=0.5)
        if k == 0:
            ax.legend(loc="upper left", fontsize=7, title="model (open: disaggregated)", title_fontsize=7)
    fig.suptitle(f"infersim vs MLPerf operating points: {result['predicted_rows']} of {result['rows']} rows "
                 f"predicted at their load", fontsize=10)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format=kind)
    return write_atomic(path, buf.getvalue())
