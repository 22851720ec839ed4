"""Accuracy benchmark: infersim vs the bundled MLPerf results (or any CSV of the same columns).

Prints the accuracy table (all rows, frontier, by model / hardware / scenario / round), the
worst 10 rows and the wall time of the whole validation. With ``--cv`` it also prints
cross-validated (held-out) error after calibration: leave one round out and leave one hardware
out. ``--calibrate`` prints the in-sample fit on all rows.

    python benchmarks/accuracy.py [--data FILE] [--cv] [--calibrate] [--plot FILE.png] [--json FILE]

Accuracy is measured here, never asserted by timed tests (shared/DESIGN.md, Targets).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

_T0 = time.perf_counter()

from infersim import calibration, validation  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=None, help="CSV of published rows (default: the bundled data set)")
    ap.add_argument("--workers", type=int, default=None, help="prediction processes (default: auto)")
    ap.add_argument("--worst", type=int, default=10, help="worst rows to list")
    ap.add_argument("--plot", default=None, help="write a predicted-vs-published plot here")
    ap.add_argument("--json", default=None, help="write the validation report (JSON) here")
    ap.add_argument("--calibrate", action="store_true", help="also fit all rows and print the in-sample fit")
    ap.add_argument("--cv", action="store_true", help="also cross-validate the calibration (slow)")
    ap.add_argument("--max-nfev", type=int, default=30, help="optimizer iterations for --calibrate")
    ap.add_argument("--cv-max-nfev", type=int, default=8, help="optimizer iterations per CV fold")
    ap.add_argument("--cv-folds", default="round,hardware", help="comma-separated: round, hardware")
    args = ap.parse_args(argv)

    data = args.data or str(validation.bundled_data())
    t = time.perf_counter()
    rows = validation.load_rows(data)
    report = validation.validate(rows, workers=args.workers)
    wall = time.perf_counter() - t
    print(report.to_table(worst=args.worst))
    print()
    print(f"validation wall time: {wall:.2f} s for {len(rows)} rows ({report.predictions} distinct predictions, "
          f"{wall / max(report.predictions, 1) * 1e3:.1f} ms each); since process start incl. imports: "
          f"{time.perf_counter() - _T0:.2f} s; CPUs: {os.cpu_count()}")
    if args.plot:
        print(f"plot: {validation.plot(report, args.plot)}")
    if args.json:
        print(f"json: {validation.write_text(args.json, report.to_json())}")
    if args.calibrate:
        print("\n== calibration on all frontier rows (in-sample) ==")
        res = calibration.calibrate(rows, max_nfev=args.max_nfev, workers=args.workers, log=_log)
        print(res.to_table())
    if args.cv:
        print(f"\n== cross-validation (max_nfev {args.cv_max_nfev} per fold) ==")
        t = time.perf_counter()
        cv = calibration.cross_validate(rows, folds=tuple(args.cv_folds.split(",")), max_nfev=args.cv_max_nfev,
                                        workers=args.workers, log=_log)
        print(calibration.format_cv(cv))
        print(f"cross-validation wall time: {time.perf_counter() - t:.0f} s")
        if args.json:
            base, ext = os.path.splitext(args.json)
            path = validation.write_text(f"{base}.cv{ext or '.json'}", json.dumps(cv, indent=2, default=str))
            print(f"cv json: {path}")
    return 0


def _log(msg: str) -> None:
    print(f"  [{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
