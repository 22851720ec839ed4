"""Accuracy benchmark: infersim vs the bundled MLPerf results (or any CSV of the same columns).

Prints the accuracy table (all rows, frontier, by model / hardware / scenario / round), the
worst 10 rows and the wall time of the whole accuracy. ``--calibrate`` prints the in-sample fit
on all frontier rows, its wall time, and every parameter on a bound of its documented range.
``--operating-points bundled`` (or a CSV) also fits the model's mean TPOT at each run's steady
decode batch against its TPOT p50 (``infersim.accuracy.oppoints``); the default ``none`` fits the
throughput rows alone.
``--cv`` prints cross-validated (held-out) error: leave one round out, leave one hardware out and
leave one model out (frontier median / p90), each fold fitted from the documented defaults.
Nothing is written to the profiles.

    python benchmarks/accuracy.py [--data FILE] [--calibrate] [--cv] [--operating-points bundled|none|FILE]
                                  [--plot FILE.png] [--json FILE]

Accuracy is measured here, never asserted by timed tests (shared/DESIGN.md, Targets).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

_T0 = time.perf_counter()

from infersim import accuracy  # noqa: E402
from infersim.accuracy.progress import LineProgress  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=None, help="CSV of published rows (default: the bundled data set)")
    ap.add_argument("--workers", type=int, default=None, help="prediction processes (default: auto)")
    ap.add_argument("--worst", type=int, default=10, help="worst rows to list")
    ap.add_argument("--plot", default=None, help="write a predicted-vs-published plot here")
    ap.add_argument("--cv-plot", default=None, help="with --cv: draw each fold kind's held-out errors to this .png/.svg/.pdf")
    ap.add_argument("--json", default=None, help="write the validation report (JSON) here")
    ap.add_argument("--calibrate", action="store_true", help="also fit all rows and print the in-sample fit")
    ap.add_argument("--cv", action="store_true", help="also cross-validate the calibration (slow)")
    ap.add_argument("--max-nfev", type=int, default=None, help="optimizer evaluations for --calibrate (default: calibrate's)")
    ap.add_argument("--cv-max-nfev", type=int, default=accuracy.CV_MAX_NFEV, help="optimizer evaluations per CV fold")
    ap.add_argument("--cv-folds", default="round,hardware,model", help="comma-separated: round, hardware, model")
    ap.add_argument("--cv-start-jitter", type=float, default=0.0,
                    help="with --cv: start each fold's optimizer this far (normal sd on each parameter's [0, 1] "
                         "scale) from the documented defaults, a probe of the folds' path noise (default 0: none)")
    ap.add_argument("--cv-jitter-seed", type=int, default=0, help="seed of --cv-start-jitter")
    ap.add_argument("--operating-points", default="none",
                    help="operating points fitted beside the throughput rows: 'bundled' (data/mlperf_operating_points.csv), "
                         "'none', or a CSV path")
    ap.add_argument("--op-weight", type=float, default=None, help="weight of an operating-point residual (default: calibrate's)")
    ap.add_argument("--jacobian", choices=accuracy.JACOBIAN_KINDS, default=None,
                    help="the fits' Jacobian (default: by the start, infersim.accuracy.JACOBIAN)")
    ap.add_argument("--refresh", type=int, default=None, help="with --jacobian secant: a fresh difference after this many updates")
    args = ap.parse_args(argv)

    data = args.data or str(accuracy.bundled_data())
    t = time.perf_counter()
    rows = accuracy.load_rows(data)
    report = accuracy.validate(rows, workers=args.workers)
    wall = time.perf_counter() - t
    print(report.to_table(worst=args.worst))
    print()
    print(f"validation wall time: {wall:.2f} s for {len(rows)} rows ({report.predictions} distinct predictions, "
          f"{wall / max(report.predictions, 1) * 1e3:.1f} ms each); since process start incl. imports: "
          f"{time.perf_counter() - _T0:.2f} s; CPUs: {os.cpu_count()}")
    if args.plot:
        print(f"plot: {accuracy.plot(report, args.plot)}")
    if args.json:
        print(f"json: {accuracy.write_text(args.json, report.to_json())}")
    ops = {"bundled": True, "none": None}.get(args.operating_points, args.operating_points)
    op_kw = {"operating_points": ops} | ({} if args.op_weight is None else {"op_weight": args.op_weight})
    op_kw |= {k: v for k, v in (("jacobian", args.jacobian), ("refresh", args.refresh)) if v is not None}
    if args.calibrate:
        print("\n== calibration on all frontier rows (in-sample) ==")
        t = time.perf_counter()
        kw = dict(op_kw) | ({} if args.max_nfev is None else {"max_nfev": args.max_nfev})
        res = accuracy.calibrate(rows, workers=args.workers, progress=LineProgress(_log), **kw)
        print(res.to_table())
        print(f"calibrate wall time: {time.perf_counter() - t:.1f} s ({res.evaluations} evaluations, "
              f"{res.predictions} predictions); in-sample frontier median {res.after['median_ape']:.1f} %, "
              f"p90 {res.after['p90_ape']:.1f} %; parameters on a bound: {len(res.findings)}")
    if args.cv:
        print(f"\n== cross-validation (max_nfev {args.cv_max_nfev} per fold) ==")
        t = time.perf_counter()
        cv = accuracy.cross_validate(rows, folds=tuple(args.cv_folds.split(",")), max_nfev=args.cv_max_nfev,
                                     workers=args.workers, progress=LineProgress(_log), **op_kw,
                                     start_jitter=args.cv_start_jitter, jitter_seed=args.cv_jitter_seed)
        print(accuracy.format_cv(cv))
        for kind, block in cv.items():
            print(f"{kind}: frontier median {block['median_ape']:.1f} %, p90 {block['p90_ape']:.1f} % "
                  f"({block['rows']} held-out rows; uncalibrated {block['uncalibrated_median_ape']:.1f} % / "
                  f"{block['uncalibrated_p90_ape']:.1f} %)")
        print(f"cross-validation wall time: {time.perf_counter() - t:.0f} s")
        if args.cv_plot:
            print(f"cv plot: {accuracy.plot_cv(cv, args.cv_plot)}")
        if args.json:
            base, ext = os.path.splitext(args.json)
            path = accuracy.write_text(f"{base}.cv{ext or '.json'}", json.dumps(cv, indent=2, default=str))
            print(f"cv json: {path}")
    return 0


def _log(msg: str) -> None:
    print(f"  [{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
