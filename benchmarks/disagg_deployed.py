"""The disaggregated MLPerf runs as deployed (issue 10): at their measured load, their decode steps,
and the capacity of their own split.

    python benchmarks/disagg_deployed.py

Prints, for every Server / Interactive run whose config says it ran disaggregated (NVIDIA's v6.0
GB200 / GB300 x72 runs; ``data/mlperf_engine_settings.csv``):

1. at the measured load (``at_load.validate``), on the round preset's capacity-best split and on the
   run's own pools (``--run-engine``): predicted against measured TPOT p50 and TTFT p99;
2. the decode-only step of one of the run's own decode workers at its share of the measured
   steady occupancy (λ · tokens per sample · TPOT p50 over the decode workers) against the
   measured TPOT p50: a decode step without prompt stalls, measured;
3. the capacity of the Llama-2-70B Server runs' own split (28 prefill + 44 decode TP1 workers, the
   decode batch cap of the run) against the published rate and the validation's search.
Inputs of the runs only (their configs); the measured latencies are compared, never read by the model.
"""

from __future__ import annotations

import time

from infersim import api, at_load
from infersim.accuracy.oppoints import load_op_rows, model_id
from infersim.disagg_load import decode_tpot
from infersim.run_settings import load_engine_settings, run_disagg
from infersim.serving import WorkloadStats


def _pct(a, b):
    return f"{100 * (a / b - 1):+6.1f} %" if a and b and a == a else "   —   "


def at_load_rows() -> None:
    print("1. at the measured load: TPOT p50 (pred / meas, error) and TTFT p99 (pred − meas) per split")
    data = at_load.bundled_data()
    reports = {"preset split": at_load.validate(data), "own pools": at_load.validate(data, run_settings=True)}
    seen = set()
    for mode, rep in reports.items():
        for r in rep["per_row"]:
            if not r.get("disaggregated_run") or r["benchmark"].endswith("99.9"):
                continue
            ident = (mode, r["system"], r["benchmark"], r["scenario"])
            if ident in seen:
                continue
            seen.add(ident)
            m, p, c = r["measured"], r.get("predicted") or {}, r.get("config") or {}
            pools = f"{c.get('prefill_workers', '?')}P+{c.get('decode_workers', '?')}D" if c else "—"
            if r["reason"]:
                print(f"  {mode:12s} {r['system'][:28]:28s} {r['benchmark']:14s} {r['scenario']:11s} {pools:8s} {r['reason']}")
                continue
            print(f"  {mode:12s} {r['system'][:28]:28s} {r['benchmark']:14s} {r['scenario']:11s} {pools:8s} "
                  f"TPOT {p['tpot_p50_ms']:6.1f} / {m['tpot_p50_ms']:6.1f} ms {_pct(p['tpot_p50_ms'], m['tpot_p50_ms'])}   "
                  f"TTFT p99 {(p['ttft_p99_ms'] - m['ttft_p99_ms']) / 1e3:+.3f} s   prefill ρ {r.get('prefill_utilization', 0):.2f}")
    for mode, rep in reports.items():
        print(f"  {mode}: all predicted rows TPOT p50 median {rep['tpot_p50_median_ape']:.2f} %, "
              f"|TTFT p99| {rep['ttft_p99_median_abs_error_s']:.3f} s, {rep['predicted_rows']} rows")


def decode_steps() -> None:
    print("\n2. decode-only step of the run's own decode worker at its measured occupancy")
    settings = load_engine_settings()
    for o in load_op_rows():
        runs = [v for k, v in settings.items() if k[:3] == (o.version, o.submitter, o.system)
                and model_id(k[3]) == o.model and k[4].lower() == o.scenario]
        run = runs[0] if runs else {}
        if not run.get("serving_mode", "").startswith("disaggregated"):
            continue
        p = api.predict(o.hardware, o.model, o.key.scenario, o.accelerators, round=o.key.preset, enable=["disagg"])
        stats = WorkloadStats.from_workload(p.inputs.scenario.workload, p.inputs.model).with_output_mean(o.tokens_per_sample)
        own = run_disagg(p.plan, run, stats, o.accelerators)
        if own is None:
            continue
        plan, dep = own
        b = o.occupancy / dep["decode_workers"]
        t = float(decode_tpot(plan, dep["decode"], stats, b))
        print(f"  {o.hardware:12s} {o.model:14s} {o.scenario:11s} {dep['decode_workers']:3d} decode × tp{int(dep['decode'].tp)}"
              f"  {b:7.0f} sequences each   model {1e3 * t:6.1f} ms   measured {1e3 * o.tpot_s:6.1f} ms  {_pct(t, o.tpot_s)}")


def own_split() -> None:
    print("\n3. capacity of the Llama-2-70B Server runs' own split (tokens/s, against the published rate)")
    published = {"gb300-nvl72": (868278.0, 2048), "gb200-nvl72": (810104.0, 1024)}
    for hw, (pub, cap) in published.items():
        search = api.predict(hw, "llama2-70b", "mlperf-llama2-70b-server", 72, round="v6.0")
        own = api.predict(hw, "llama2-70b", "mlperf-llama2-70b-server", 72, round="v6.0", enable=["disagg"],
                          params={"disagg": {"prefill_workers": 28, "decode_workers": 44}}, batch=float(cap))
        print(f"  {hw:12s} search {search.metrics['tokens_per_s']:10,.0f} {_pct(search.metrics['tokens_per_s'], pub)}   "
              f"own split (28P + 44D, batch {cap}) {own.metrics['tokens_per_s']:10,.0f} {_pct(own.metrics['tokens_per_s'], pub)}"
              f"   published {pub:10,.0f}")


if __name__ == "__main__":
    t0 = time.perf_counter()
    at_load_rows()
    decode_steps()
    own_split()
    print(f"\n{time.perf_counter() - t0:.1f} s")
