"""Accuracy benchmark for the samples/s benchmarks: WAN-2.2-T2V, DLRMv3 and Qwen3-VL.

Predicts every row of ``data/mlperf_non_llm_results.csv`` (or ``--data``) and prints the median
and p90 absolute error per benchmark, per benchmark × scenario and per hardware, the rows, and
the wall time. ``--with-round-maturity`` is a sensitivity check: it multiplies the hardware's
GEMM (MAMF, else compute_fraction) and dense-attention fractions of the non-LLM rows by the v6.0
preset's LLM kernel-maturity factor (which the model itself does not apply to these workloads)
and reports the same table.

    python benchmarks/non_llm_accuracy.py [--data FILE] [--with-round-maturity] [--json FILE]

Accuracy is measured here, never asserted by timed tests (shared/DESIGN.md, Targets).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

_T0 = time.perf_counter()

from infersim.specs import catalog  # noqa: E402
from infersim.workloads import validate as wv  # noqa: E402


def _with_maturity(round_name: str):
    """Patch the non-LLM predictor to scale efficiencies by the round's kernel_efficiency."""
    from infersim.optimizations.presets import load_preset

    k = load_preset(round_name).kernel_efficiency
    original = wv.predict

    def scaled(hardware, model, scenario, accelerators=None, precision=None):
        hw = catalog.load("hardware", hardware)
        e, c = hw.efficiency, hw.compute
        mamf = None if c.mamf_fraction is None else {p: min(1.0, f * k) for p, f in c.mamf_fraction.items()}
        hw2 = hw.model_copy(update={
            "efficiency": e.model_copy(update={
                "compute_fraction": min(1.0, e.compute_fraction * k),
                "dense_attention_fraction": min(1.0, e.dense_attention_fraction * k)}),
            "compute": c.model_copy(update={"mamf_fraction": mamf})})
        return original(hw2, model, scenario, accelerators, precision=precision)

    wv.predict = scaled
    return k


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(Path(__file__).resolve().parent.parent / "data" / "mlperf_non_llm_results.csv"))
    ap.add_argument("--with-round-maturity", action="store_true", help="sensitivity: apply the v6.0 kernel maturity")
    ap.add_argument("--json", default=None, help="write the report (JSON) here")
    args = ap.parse_args(argv)
    if args.with_round_maturity:
        k = _with_maturity("v6.0")
        print(f"sensitivity run: non-LLM GEMM/attention fractions x {k:g} (v6.0 preset kernel_efficiency)")
    t0 = time.perf_counter()
    rows, summary = wv.validate_metric_csv(args.data)
    wall = time.perf_counter() - t0
    print(wv.render(rows, summary, "table"))
    by_hw: dict[str, list[float]] = {}
    for r in rows:
        if r.predicted is not None:
            by_hw.setdefault(f"{r.model} on {r.hardware}", []).append(abs(r.error_pct))
    print("\nmedian abs. error by benchmark and hardware:")
    for key, apes in sorted(by_hw.items()):
        apes.sort()
        print(f"  {key:40s} {len(apes):3d} rows  {apes[len(apes) // 2]:6.1f} %")
    print(f"\nvalidated {len(rows)} rows in {wall:.2f} s (process {time.perf_counter() - _T0:.2f} s)")
    if args.json:
        Path(args.json).write_text(wv.render(rows, summary, "json"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
