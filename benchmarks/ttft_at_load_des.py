"""Why the predicted TTFT at the measured load is high on long prompts (issue 10): the closed form
against its own discrete-event oracle, fed the model's own step costs, and what the DES needs to
reproduce the run.

    python benchmarks/ttft_at_load_des.py [--model llama3.1-405b] [--requests 6000] [--prefill-scale 0.9]

For every Server / Interactive operating point of ``--model`` whose run records its engine settings
and an aggregated single-rank layout (``data/mlperf_engine_settings.csv``, as ``infersim validate
--at-load --run-engine`` prices it), at the run's scheduled load per instance:

- ``model``: the prediction ``validate --at-load --run-engine`` reports (TTFT mean, p50, p99; mean TPOT);
- ``closed``: ``scheduler.engine_queue`` on the model's costs tabulated once (decode iteration over
  the decode rows at the run's mean context, host time included; one prefill token = a whole mean
  prompt's extra time over the decode step, divided by its length) — the same inputs as the DES;
- ``DES``: ``des.simulate_engine`` on those costs, Poisson arrivals (seed 3);
- ``DES lb``: the same with each instance's arrivals as the harness's load balancing makes them
  (``scheduler.instance_arrival_scv`` with ``load_balancing``; one instance: unchanged);
- ``DES lb ×s``: and every prompt token's cost times ``--prefill-scale``;
- ``run``: the measured TTFT mean, p50, p99 and mean TPOT.

If ``closed`` ≈ ``DES``, the queueing model is not where the run's TTFT is lost: what the DES needs
(arrival dispersion, cheaper prefill) to reach the run is. About 10 s on two cores.
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import replace

import numpy as np

from infersim import at_load as al
from infersim import des, scheduler
from infersim.accuracy.data import resolve_preset
from infersim.accuracy.oppoints import _num, load
from infersim.engine import step_cost
from infersim.graph import Layout, Shape
from infersim.run_settings import RUN_KEY, apply_run, load_engine_settings
from infersim.scheduler import operating_point
from infersim.serving import WorkloadStats

ROWS = np.array([1.0, 2, 4, 8, 16, 32, 64, 96, 128, 192, 256, 384, 512, 768, 1024])


def costs(plan, layout: Layout, stats: WorkloadStats):
    """(decode_time(rows), seconds per prompt token) of ``plan`` on ``layout`` at the workload's
    mean context: the decode iteration (step + host time) tabulated over ``ROWS`` and interpolated;
    a prompt token's cost from one whole mean prompt beside a 64-row decode step."""
    cap = plan.engine.max_batch_size or ROWS[-1]
    rows = ROWS[ROWS <= max(cap, 1.0)]
    dec = np.array([float(step_cost(plan, layout, Shape(decode_seqs=r, decode_q=1.0, decode_ctx=stats.context_mean)).total)
                    + float(plan.engine.host_time(r)) for r in rows])
    base = Shape(decode_seqs=min(64.0, rows[-1]), decode_q=1.0, decode_ctx=stats.context_mean)
    mixed = replace(base, prefill_seqs=1.0, prefill_len=stats.isl_mean, prefill_len_sq=stats.isl_sq)
    s_tok = (float(step_cost(plan, layout, mixed).total) - float(step_cost(plan, layout, base).total)) / stats.isl_mean
    return (lambda r: np.interp(np.asarray(r, dtype=float), rows, dec)), s_tok


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="llama3.1-405b")
    ap.add_argument("--requests", type=int, default=6000, help="DES requests per run (seed 3)")
    ap.add_argument("--prefill-scale", type=float, default=0.9, help="prompt-token cost factor of the last DES column")
    args = ap.parse_args()
    settings = load_engine_settings()
    systems = al._Systems()
    head = f"{'run':<58} {'inst':>4} {'qps/inst':>8}  {'TTFT mean / p50 / p99 s, TPOT mean ms':<34}"
    print(head)
    gaps = {k: [] for k in ("model", "closed", "DES", "DES lb", "DES lb x")}
    for cols in load(al.bundled_data()):
        scen = cols["scenario"].strip().lower()
        if al.model_id(cols.get("benchmark", "")) != args.model or scen not in ("server", "interactive"):
            continue
        run = settings.get(tuple(cols.get(k, "").strip() for k in RUN_KEY))
        if run is None or run.get("serving_mode", "").startswith("disaggregated"):
            continue
        hw, n, qps = al.hardware_id(cols), _num(cols["total_accelerators"]), _num(cols["scheduled_samples_per_s"])
        if hw is None or n is None or qps is None:
            continue
        pred = systems.get((resolve_preset(cols["version"].strip()), hw, args.model, f"mlperf-{args.model}-{scen}", int(n), False))
        if isinstance(pred, str) or not pred.feasible:
            continue
        stats = WorkloadStats.from_workload(pred.inputs.scenario.workload, pred.inputs.model).with_output_mean(
            _num(cols.get("tokens_per_sample")))
        plan, own = apply_run(pred.plan, run, stats, int(n))
        if own is None or own["dp"] != 1:
            continue
        lay = Layout(tp=own["tp"], pp=own["pp"], ep=own["ep"], dp=own["dp"])
        replicas = own["replicas"]
        ok, why, m = operating_point(plan, lay, replicas, stats, pred.inputs.scenario, qps, own["max_batch"],
                                     n / (own["tp"] * own["pp"]), _num(cols.get("samples_run")))
        rate = qps / replicas
        decode_time, s_tok = costs(plan, lay, stats)
        eng = plan.engine
        b = np.geomspace(1.0, float(eng.max_batch_size or 1024), 400)
        cf = scheduler.engine_queue(eng, 1, b, stats, 1.0, 0.99, decode_time, lambda k, imb: s_tok * stats.isl_mean * imb)
        i = int(np.argmin(np.abs(cf.rate - rate)))
        lb = float(scheduler.instance_arrival_scv(replace(eng, instance_dispatch="load_balancing"), 1.0, replicas, stats.osl_scv))
        lens, outs = (stats.isl_points, stats.isl_probs), (stats.osl_points, stats.osl_probs)

        def sim(scv=1.0, scale=1.0):
            return des.simulate_engine(rate, 1, eng, decode_time, s_tok * scale, lens, outs, n_requests=args.requests,
                                       percentile=99.0, seed=3, arrival_scv=scv)

        d0, d1, d2 = sim(), sim(lb), sim(lb, args.prefill_scale)
        meas = (_num(cols.get("ttft_mean_ms")) / 1e3, _num(cols.get("ttft_p50_ms")) / 1e3, _num(cols.get("ttft_p99_ms")) / 1e3,
                _num(cols.get("tpot_mean_ms")) / 1e3)
        lines = {
            "model": (m["ttft_mean_s"], m["ttft_p50_s"], m["ttft_s"], m["tpot_mean_s"]),
            "closed": (float(cf.ttft_mean[i]), np.nan, float(cf.ttft_p99[i]), float(cf.tpot_mean[i])),
            "DES": (d0.ttft_mean, d0.ttft_p50, d0.ttft_p, d0.tpot_mean),
            "DES lb": (d1.ttft_mean, d1.ttft_p50, d1.ttft_p, d1.tpot_mean),
            "DES lb x": (d2.ttft_mean, d2.ttft_p50, d2.ttft_p, d2.tpot_mean),
        }
        name = f"{cols['version']} {cols['submitter'][:12]} {hw} x{int(n)} {scen} tp{own['tp']} pp{own['pp']}"
        print(f"{name:<58} {replicas:>4} {rate:>8.3f}  run      {meas[0]:5.2f} / {meas[1]:5.2f} / {meas[2]:5.2f}, {1e3 * meas[3]:6.1f}")
        for k, v in lines.items():
            label = f"DES lb x{args.prefill_scale:g}" if k == "DES lb x" else k
            p50 = "  -  " if np.isnan(v[1]) else f"{v[1]:5.2f}"
            print(f"{'':<58} {'':>4} {'':>8}  {label:<8} {v[0]:5.2f} / {p50} / {v[2]:5.2f}, {1e3 * v[3]:6.1f}"
                  f"   p99 {v[2] - meas[2]:+5.2f} s")
            gaps[k].append(v[2] - meas[2])
    print()
    for k, v in gaps.items():
        if v:
            label = f"DES lb x{args.prefill_scale:g}" if k == "DES lb x" else k
            print(f"{label:<10} median signed TTFT p99 error {statistics.median(v):+.2f} s over {len(v)} runs")


if __name__ == "__main__":
    main()
