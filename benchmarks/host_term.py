"""Issue-10 item 6: the host term of a Python executor, fitted on v5.1 single-instance B200 runs
and checked out of sample.

    python benchmarks/host_term.py [--data FILE]

Mechanism (infersim.plan.Engine.host_time): an engine whose executor loop runs in Python
(TensorRT-LLM's PyTorch backend behind trtllm-serve: DeepSeek-R1 in v5.1 and v6.0, gpt-oss-120b in
v6.0; shared/reference/mlperf_submission_configs.md, core types) builds and sends one response per
running request every ``stream_interval`` tokens, serially with the GPU iteration (with attention
DP one process gathers every rank's responses). Per iteration that is
``host_us_per_stream_event`` × occupancy per instance / ``stream_interval``.

The fit: for every Server/Interactive row whose round preset runs that model on a Python executor,
the model's mean TPOT at the *measured* occupancy (loadgen's mean in-flight queries, Little's law)
with the capacity-best layout of ``validate --at-load``, and the per-event host time that makes it
equal the measured mean TPOT (the model is linear in it to within the secant step used here).
Fit set: v5.1, one instance of 8 B200 GPUs. The fitted value is the median over the fit set; every
other row is out of sample. Printed: the implied value per row and the TPOT error at the measured
occupancy without and with the fitted term.

Then the Offline check, also out of sample: the same executor loop runs in Offline (v5.1 streamed
every token, v6.0 every 100), so every Offline row of a Python-executor model in
mlperf_llm_results.csv is predicted at the capacity search's layout and batch with the term at 0
and at the fitted value (``scheduler.offline``: the gated attention-DP engine where the preset
runs one), against the published tokens/s per accelerator.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PROBE_S = 10e-6


def with_host(plan, host_s: float):
    """``plan`` with its engine's host time per streamed response set to ``host_s``."""
    return dataclasses.replace(plan, engine=dataclasses.replace(plan.engine, host_s_per_stream_event=host_s))


def rows_of(data):
    from infersim import at_load as al
    from infersim.accuracy.data import resolve_preset
    from infersim.graph import Layout
    from infersim.scheduler import server
    from infersim.serving import WorkloadStats

    systems = al._Systems()
    out = []
    for cols in csv.DictReader(open(data or al.bundled_data())):
        scen = cols["scenario"].strip().lower()
        hw, n = al.hardware_id(cols), al._num(cols.get("total_accelerators"))
        occ, tpot = al._num(cols.get("mean_inflight_queries")), al._num(cols.get("tpot_mean_ms"))
        if scen not in ("server", "interactive") or hw is None or not (n and occ and tpot):
            continue
        model = al.model_id(cols["benchmark"])
        pred = systems.get((resolve_preset(cols["version"].strip()), hw, model, f"mlperf-{model}-{scen}", int(n), False))
        if isinstance(pred, str) or not pred.feasible or not pred.plan.engine.python_executor:
            continue
        c = pred.config
        lay = Layout(tp=c["tp"], pp=c["pp"], ep=c["ep"], dp=c["dp"])
        stats = WorkloadStats.from_workload(pred.inputs.scenario.workload, pred.inputs.model)
        b = np.array([occ / c["replicas"]])

        def tpot_at(host_s):
            plan = with_host(pred.plan, host_s)
            return 1e3 * float(server(plan, lay, b, stats, 99.0, n / (c["tp"] * c["pp"])).tpot_mean[0])

        t0, t1 = tpot_at(0.0), tpot_at(PROBE_S)
        implied = PROBE_S * (tpot - t0) / (t1 - t0)
        out.append(dict(cols=cols, hw=hw, n=int(n), replicas=c["replicas"], tpot=tpot, t0=t0, slope=(t1 - t0) / PROBE_S,
                        implied_us=1e6 * implied, fit=cols["version"] == "v5.1" and hw == "b200" and c["replicas"] == 1
                        and int(n) == 8))
    return out


def offline_rows(c_us: float):
    """(row, published, predicted without, predicted with the host term) per Offline row of a model
    the round's preset runs on a Python executor."""
    from infersim import api, scheduler
    from infersim.accuracy.data import bundled_data, load_rows, resolve_preset
    from infersim.graph import Layout
    from infersim.serving import WorkloadStats

    out, seen = [], {}
    for row in load_rows(bundled_data()):
        if row.scenario != "offline":
            continue
        key = (resolve_preset(row.version), row.hardware, row.model, row.accelerators)
        if key not in seen:
            try:
                seen[key] = api.predict(row.hardware, row.model, f"mlperf-{row.model}-offline", row.accelerators, round=key[0])
            except Exception as exc:  # noqa: BLE001 - a row the model cannot predict is reported, not fatal
                seen[key] = str(exc)
        pred = seen[key]
        if isinstance(pred, str) or not pred.plan.engine.python_executor:
            continue
        c = pred.config
        lay = Layout(tp=c["tp"], pp=c["pp"], ep=c["ep"], dp=c["dp"])
        stats = WorkloadStats.from_workload(pred.inputs.scenario.workload, pred.inputs.model)
        b = np.array([c["batch"]])

        def per_acc(host_s):
            plan = with_host(pred.plan, host_s)
            return float(scheduler.offline(plan, lay, b, stats).tokens_per_s[0]) * c["replicas"] / row.accelerators

        out.append((row, row.tokens_per_s / row.accelerators, per_acc(0.0), per_acc(c_us * 1e-6)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=None)
    a = ap.parse_args()
    rows = rows_of(a.data)
    fit = [r for r in rows if r["fit"]]
    if not fit:
        sys.exit("no fit rows (v5.1, 8 x B200, one instance, Python executor)")
    c_us = statistics.median(r["implied_us"] for r in fit)
    print(f"fitted host_us_per_stream_event = {c_us:.2f} us (median of {len(fit)} v5.1 single-instance B200 rows)\n")
    print(f"{'set':4} {'ver':5} {'submitter':12} {'system':36} {'scen':6} {'n':>4} {'implied us':>10} "
          f"{'TPOT meas':>9} {'model 0':>8} {'err':>6} {'model fit':>9} {'err':>6}")
    errs0, errs1 = {"fit": [], "out": []}, {"fit": [], "out": []}
    for r in sorted(rows, key=lambda r: (not r["fit"], r["cols"]["version"], r["cols"]["system"])):
        t1 = r["t0"] + r["slope"] * c_us * 1e-6
        e0, e1 = 100 * (r["t0"] / r["tpot"] - 1), 100 * (t1 / r["tpot"] - 1)
        key = "fit" if r["fit"] else "out"
        errs0[key].append(abs(e0))
        errs1[key].append(abs(e1))
        c = r["cols"]
        print(f"{key:4} {c['version']:5} {c['submitter'][:12]:12} {c['system'][:36]:36} {c['scenario'][:6]:6} {r['n']:4d} "
              f"{r['implied_us']:10.1f} {r['tpot']:9.1f} {r['t0']:8.1f} {e0:+6.1f} {t1:9.1f} {e1:+6.1f}")
    for key in ("fit", "out"):
        if errs0[key]:
            print(f"{key}: {len(errs0[key])} rows, median |TPOT error| at the measured occupancy "
                  f"{statistics.median(errs0[key]):.1f} % without the host term, {statistics.median(errs1[key]):.1f} % with it")
    print(f"\nOffline, out of sample (capacity layout and batch, tokens/s per accelerator; host term 0 / {c_us:.2f} us):")
    print(f"{'ver':5} {'submitter':14} {'system':40} {'n':>4} {'published':>9} {'model 0':>8} {'err':>6} {'model fit':>9} {'err':>6}")
    by_round: dict = {}
    for row, meas, p0, p1 in sorted(offline_rows(c_us), key=lambda t: (t[0].version, t[0].columns.get("system", ""))):
        e0, e1 = 100 * (p0 / meas - 1), 100 * (p1 / meas - 1)
        by_round.setdefault(row.version, ([], []))
        by_round[row.version][0].append(abs(e0))
        by_round[row.version][1].append(abs(e1))
        print(f"{row.version:5} {row.columns.get('submitter', '')[:14]:14} {row.columns.get('system', '')[:40]:40} {row.accelerators:4d} {meas:9.0f} {p0:8.0f} {e0:+6.1f} {p1:9.0f} {e1:+6.1f}")
    for ver, (a0, a1) in sorted(by_round.items()):
        print(f"{ver} Offline: {len(a0)} rows, median |error| {statistics.median(a0):.1f} % without the host term, "
              f"{statistics.median(a1):.1f} % with it")


if __name__ == "__main__":
    main()
