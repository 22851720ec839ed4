"""Validation at the measured load: predict each MLPerf Server/Interactive run at the arrival rate
the submitter actually scheduled and compare its latencies.

Input: a CSV with at least ``version, submitter, system, benchmark, scenario, total_accelerators,
scheduled_samples_per_s, tokens_per_sample, tpot_p50_ms, ttft_p50_ms, ttft_p99_ms, tpot_p99_ms``
(the columns of ``data/mlperf_operating_points.csv``). Hardware: the row's ``hardware`` column
where filled, else the accelerator / system name matched by ``HARDWARE_RULES``. Model: the
benchmark name without its accuracy suffix (``llama2-70b-99.9`` → ``llama2-70b``).

Per row: the capacity-best aggregated configuration of the row's round preset
(``api.predict(..., disable=["disagg"])``, shared by rows with the same system) is run at
``scheduled_samples_per_s`` (``scheduler.operating_point``). Errors: TPOT p50 and p99 as signed
percentages, TTFT p99 in seconds. Rates: the steady-state output rate is qps × mean OSL; loadgen's
*completed* rate divides the tokens by the issue time plus the last query's latency,
completed = steady × issue / (issue + latency), issue = samples_run / qps, latency = predicted mean
TTFT + (OSL − 1) × mean TPOT (``scheduler.operating_point``).
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from .accuracy.oppoints import (HARDWARE_RULES, REQUIRED, _num, bundled_data, hardware_id, load,  # noqa: F401
                                model_id)
from .errors import SpecError


class _Systems:
    """Capacity-best aggregated configuration per (preset, hardware, model, scenario, accelerators)."""

    def __init__(self):
        self.cache: dict[tuple, Any] = {}

    def get(self, key):
        if key not in self.cache:
            from . import api

            preset, hw, model, scenario, n = key
            try:
                self.cache[key] = api.predict(hw, model, scenario, n, round=preset, disable=["disagg"])
            except SpecError as exc:
                self.cache[key] = f"bad input: {exc}"
        return self.cache[key]


def predict_row(cols: dict[str, str], systems: _Systems) -> dict[str, Any]:
    """One row's prediction at its scheduled load and its errors (or a reason)."""
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
    pred = systems.get((preset, hw, out["model"], f"mlperf-{out['model']}-{scen}", int(n)))
    if isinstance(pred, str) or not pred.feasible:
        out["reason"] = pred if isinstance(pred, str) else f"infeasible at capacity: {pred.reason}"
        return out
    c = pred.config
    stats = WorkloadStats.from_workload(pred.inputs.scenario.workload, pred.inputs.model)
    # KV capacity of the chosen layout: the search's max batch at that point
    samples = _num(cols.get("samples_run"))
    ok, why, m = operating_point(pred.plan, Layout(tp=c["tp"], pp=c["pp"], ep=c["ep"], dp=c["dp"]), c["replicas"], stats,
                                 pred.inputs.scenario, qps, c["max_batch"], n / (c["tp"] * c["pp"]), samples)
    steady = m["tokens_per_s"]
    out.update(config={k: c[k] for k in ("tp", "ep", "dp", "pp", "replicas", "mtp_depth")}, meets_limits=ok, limit=why,
               predicted={"tpot_p50_ms": 1e3 * m["tpot_p50_s"], "ttft_p50_ms": 1e3 * m["ttft_p50_s"],
                          "ttft_p99_ms": 1e3 * m["ttft_s"], "tpot_p99_ms": 1e3 * m["tpot_s"],
                          "occupancy_per_rank": m["occupancy_per_rank"], "iteration_ms": 1e3 * m["iteration_s"]},
               steady_tokens_per_s=steady,
               completed_tokens_per_s=m["completed_tokens_per_s"] if samples else None,
               measured_completed_tokens_per_s=_num(cols.get("completed_tokens_per_s")))
    p = out["predicted"]
    if not all(math.isfinite(v) for v in p.values()):
        out["reason"] = f"saturated at the measured load: {why}"
        return out
    out["tpot_p50_ape"] = 100 * abs(p["tpot_p50_ms"] / meas["tpot_p50_ms"] - 1)
    out["tpot_p99_ape"] = 100 * abs(p["tpot_p99_ms"] / meas["tpot_p99_ms"] - 1)
    out["ttft_p99_error_s"] = (p["ttft_p99_ms"] - meas["ttft_p99_ms"]) / 1e3
    return out


def validate(path) -> dict[str, Any]:
    """Per-row results and the summary (medians over the rows that were predicted)."""
    systems = _Systems()
    rows = [predict_row(r, systems) for r in load(path)]
    done = [r for r in rows if not r["reason"]]
    med = lambda xs: statistics.median(xs) if xs else None  # noqa: E731
    return {
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
