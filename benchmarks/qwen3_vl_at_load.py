"""Qwen3-VL Server runs at their measured load: the model's mean latency and occupancy against
the run logs' (``data/mlperf_operating_points.csv``), per run, and the Offline error beside it.

    python benchmarks/qwen3_vl_at_load.py [--des]

Per Server run: the capacity-best configuration of ``infersim run`` is predicted at the run's
scheduled samples/s (``api.predict(..., qps=)``, as ``infersim run --qps``), and compared with
the log's mean latency and its Little's-law in-flight count (mean_inflight_queries = rate × mean
latency). A request takes its TTFT plus OSL − 1 engine iterations, so a mean-latency gap Δ at the
same load is about Δ / OSL per iteration: ``gap/iter ms`` prints that estimate of the engine time
per iteration the model lacks at that load (the output length is the scenario's mean, 46 tokens).
The Offline column is the model's signed error on the same system's Offline row.

With ``--des`` each run is also simulated (``des.simulate_engine``: one instance at the run's load per
instance, the decode iteration and the prefill cost per prompt token priced by the model's step
cost for the capacity-best layout, the scenario's prompt and output mixes) with the waiting
prompts in arrival order and shortest prompt first (the recipes' ``--scheduling-policy=sjf``):
its mean and p99 end-to-end latency against the log's.

Nothing is fitted here and nothing is written; the figures are printed.
"""

from __future__ import annotations

import csv
import statistics
import sys
from pathlib import Path

from infersim import api

ROOT = Path(__file__).resolve().parent.parent
OPS = ROOT / "data" / "mlperf_operating_points.csv"
RESULTS = ROOT / "data" / "mlperf_non_llm_results.csv"
MODEL = "qwen3-vl-235b-a22b"
OSL_MEAN = 46.0
"""Mean output tokens per sample (scenarios/mlperf-qwen3-vl-235b-a22b-server.yaml, osl.mean)."""

HARDWARE = {"GB300": "gb300-nvl72", "GB200": "gb200-nvl72", "b300": "b300", "b200": "b200", "h200": "h200-sxm"}


def hardware_of(system: str) -> str | None:
    """Hardware profile of an MLPerf system name (the qwen3-vl systems only)."""
    for key, hw in HARDWARE.items():
        if key in system:
            return hw
    return None


def offline_rows() -> dict[tuple[str, str], float]:
    """Published Offline samples/s per (submitter, hardware)."""
    out = {}
    with RESULTS.open() as f:
        for r in csv.DictReader(f):
            if r["model"] == MODEL and r["scenario"] == "offline":
                out[(r["submitter"], r["hardware"])] = float(r["value"])
    return out


def server_runs() -> list[dict]:
    """The valid qwen3-vl Server runs of the operating-point file."""
    with OPS.open() as f:
        return [r for r in csv.DictReader(f) if r["model"] == MODEL and r["scenario"] == "Server"
                and r["result_validity"] == "VALID"]


def little_gap_per_iteration_ms(measured_latency_s: float, model_latency_s: float, osl: float = OSL_MEAN) -> float:
    """Engine time per iteration (ms) that a mean-latency gap at equal load implies: a request
    lives its TTFT plus osl − 1 iterations, so the gap is spread over about osl iterations."""
    return 1e3 * (measured_latency_s - model_latency_s) / osl


def des_latency(hw: str, n: int, load: float, policies=("fcfs", "sjf"), n_requests: int = 6000) -> dict:
    """Simulated (mean, p99) end-to-end latency, s, per policy, at ``load`` samples/s on ``n`` GPUs."""
    from dataclasses import replace

    import numpy as np

    from infersim import des
    from infersim.engine import step_cost
    from infersim.graph import Shape
    from infersim.serving import WorkloadStats
    from infersim.specs import catalog

    scenario = catalog.load("scenario", "mlperf-qwen3-vl-235b-a22b-server")
    pred = api.predict(hw, MODEL, "mlperf-qwen3-vl-235b-a22b-server", n)
    res, (i, _) = pred.result, pred.index
    plan, layout = res.plan, res.layout_at(i)
    st = WorkloadStats.from_workload(scenario.workload, catalog.load("model", MODEL))
    rows = np.arange(0, 1025, dtype=float)
    t_dec = step_cost(plan, layout, Shape(decode_seqs=np.maximum(rows, 1.0), decode_ctx=st.context_mean)).total
    base = Shape(decode_seqs=32.0, decode_ctx=st.context_mean)
    one = replace(base, prefill_seqs=1.0, prefill_len=st.isl_mean, prefill_len_sq=st.isl_sq,
                  prefill_patches=st.vision_patches, prefill_patches_sq=st.vision_patches_sq)
    s_tok = float((step_cost(plan, layout, one).total - step_cost(plan, layout, base).total) / st.isl_mean)
    out = {}
    for policy in policies:
        r = des.simulate_engine(load / pred.config["replicas"], int(layout.dp), plan.engine,
                                lambda k: np.interp(k, rows, t_dec), s_tok, (st.isl_points, st.isl_probs),
                                scenario.workload.osl.support, n_requests=n_requests, seed=1, policy=policy)
        out[policy] = (r.e2e_mean, r.e2e_p)
    return out


def main() -> None:
    offline = offline_rows()
    print(f"{'submitter':14} {'hardware':12} {'n':>2} {'load/s':>7} {'lat meas':>8} {'lat model':>9} "
          f"{'inflight meas':>13} {'model':>6} {'iter model ms':>13} {'gap/iter ms':>11} {'offline err %':>13}")
    gaps = {}
    for r in server_runs():
        hw = hardware_of(r["system"])
        if hw is None:
            continue
        n = int(r["total_accelerators"])
        load = float(r["scheduled_samples_per_s"] or r["completed_samples_per_s"])
        pred = api.predict(hw, MODEL, "mlperf-qwen3-vl-235b-a22b-server", n, qps=load)
        m = pred.metrics
        lat_meas = float(r["lat_mean_ms"]) / 1e3
        gap = little_gap_per_iteration_ms(lat_meas, m["mean_latency_s"])
        gaps.setdefault(hw, []).append(gap)
        off = offline.get((r["submitter"], hw))
        off_pred = api.predict(hw, MODEL, "mlperf-qwen3-vl-235b-a22b-offline", n).metrics["requests_per_s"]
        off_err = "" if off is None else f"{100 * (off_pred / off - 1):+.1f}"
        print(f"{r['submitter'][:14]:14} {hw:12} {n:>2} {load:7.2f} {lat_meas:8.2f} {m['mean_latency_s']:9.2f} "
              f"{float(r['mean_inflight_queries']):13.1f} {m['occupancy']:6.1f} {1e3 * m['iteration_s']:13.1f} "
              f"{gap:11.1f} {off_err:>13}")
    print()
    for hw, g in gaps.items():
        print(f"{hw:12} median gap per iteration at the measured load: {statistics.median(g):6.1f} ms")
    if "--des" not in sys.argv:
        return
    print("\nend-to-end latency at the measured load, s (mean / p99, p99/mean): log, engine DES fcfs, sjf")
    for r in server_runs():
        hw = hardware_of(r["system"])
        if hw is None:
            continue
        load = float(r["scheduled_samples_per_s"] or r["completed_samples_per_s"])
        mean, p99 = float(r["lat_mean_ms"]) / 1e3, float(r["lat_p99_ms"]) / 1e3
        sim = des_latency(hw, int(r["total_accelerators"]), load)
        cells = [f"{mean:5.2f} / {p99:5.2f} ({p99 / mean:4.2f})"] + \
            [f"{m:5.2f} / {p:5.2f} ({p / m:4.2f})" for m, p in (sim["fcfs"], sim["sjf"])]
        print(f"{r['submitter'][:14]:14} {hw:12} " + "   ".join(cells))


if __name__ == "__main__":
    main()
