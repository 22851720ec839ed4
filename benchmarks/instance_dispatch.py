"""How the harness hands requests to the instances: the round presets as shipped (each instance a
Poisson stream thinned at random) against the same presets with ``instance_dispatch`` set as the
MLPerf harnesses run (``load_balancing``, or ``round_robin``), at the shipped calibration.

    python benchmarks/instance_dispatch.py [--dispatch load_balancing|round_robin]

Prints, both ways: ``infersim validate`` over the bundled results (frontier and all rows, median and
p90 absolute capacity error) and ``infersim validate --at-load`` over the bundled operating points
(TPOT p50 median APE, median |TTFT p99| error, TPOT p99 median APE, rows the model finds over a
latency limit at the submitter's own load), then per model the median signed TTFT p99 error at the
measured load. The presets with the dispatch set are written to a temporary ``--profiles-dir``
(presets/ subfolder), the bundled files are not touched. About a minute on two cores.
"""

from __future__ import annotations

import argparse
import collections
import csv
import json
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def presets_with(dispatch: str, out: Path) -> Path:
    """Copies of the bundled presets whose engine default block sets ``instance_dispatch``."""
    d = out / "presets"
    d.mkdir(parents=True)
    for f in sorted((ROOT / "presets").glob("v*.yaml")):
        text = f.read_text()
        text, n = re.subn(r"^(  default: \{)", rf"\1instance_dispatch: {dispatch}, ", text, count=1, flags=re.M)
        if n != 1:
            raise SystemExit(f"{f}: no engine default block")
        (d / f.name).write_text(text)
    return out


def cli(args: list[str], profiles: Path | None) -> None:
    pre = ["--profiles-dir", str(profiles)] if profiles else []
    subprocess.run([sys.executable, "-m", "infersim", *pre, *args], check=True, cwd=ROOT, capture_output=True)


def capacity(path: Path) -> dict:
    rows = [r for r in csv.DictReader(path.open()) if r["error_pct"]]
    out = {}
    for name, sel in (("frontier", [r for r in rows if r["frontier"] == "true"]), ("all rows", rows)):
        e = np.abs([float(r["error_pct"]) for r in sel])
        out[name] = (len(e), float(np.median(e)), float(np.percentile(e, 90)))
    return out


def at_load(path: Path) -> tuple[dict, dict]:
    d = json.loads(path.read_text())
    keys = ("tpot_p50_median_ape", "ttft_p99_median_abs_error_s", "tpot_p99_median_ape", "rows_over_a_limit_at_load",
            "predicted_rows")
    per = collections.defaultdict(list)
    for r in d["per_row"]:
        if not r.get("reason") and "ttft_p99_error_s" in r:
            per[r["model"]].append(r["ttft_p99_error_s"])
    return {k: d[k] for k in keys}, {m: (len(v), statistics.median(v)) for m, v in sorted(per.items())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dispatch", default="load_balancing", choices=("load_balancing", "round_robin"))
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        results = {}
        for label, prof in (("shipped (random)", None), (a.dispatch, presets_with(a.dispatch, tmp / "p"))):
            cli(["validate", "--format", "csv", "--out", str(tmp / "v.csv"), "--force"], prof)
            cli(["validate", "--at-load", "--format", "json", "--out", str(tmp / "l.json"), "--force"], prof)
            results[label] = (capacity(tmp / "v.csv"), *at_load(tmp / "l.json"))
    print("capacity against the published results (shipped calibration, not refitted): n, median, p90 abs. error %")
    for label, (cap, _, _) in results.items():
        print(f"  {label:18s} " + "   ".join(f"{k} {n} {m:.2f} / {p:.2f}" for k, (n, m, p) in cap.items()))
    print("at the measured load (validate --at-load)")
    for label, (_, s, _) in results.items():
        print(f"  {label:18s} TPOT p50 {s['tpot_p50_median_ape']:.2f} %, |TTFT p99| {s['ttft_p99_median_abs_error_s']:.3f} s, "
              f"TPOT p99 {s['tpot_p99_median_ape']:.2f} %, over a limit at their own load {s['rows_over_a_limit_at_load']} "
              f"of {s['predicted_rows']}")
    print("median signed TTFT p99 error at the measured load, per model (s)")
    for label, (_, _, per) in results.items():
        print(f"  {label:18s} " + ", ".join(f"{m} {v:+.2f} ({n})" for m, (n, v) in per.items()))


if __name__ == "__main__":
    main()
