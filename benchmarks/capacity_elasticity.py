"""How sharply each published row's predicted capacity answers a slower engine step.

Every bundled hardware profile is copied with its rates divided by 1 + ``--step`` (FLOP/s, special
functions, HBM, scale-up, scale-out and torus links) and its fixed times multiplied by it (link
latencies, kernel launch, host step overhead), so every engine step the model prices is that much
longer and nothing else changes (memory capacities, prices and engine settings are the same; a
Python executor's per-response host time, a preset value, is not scaled). Both trees are validated
(``infersim validate``) and each row's elasticity is

    e = ln(capacity at the shipped profiles / capacity with the slower step) / ln(1 + step)

An Offline row that is bound by its step alone has e = 1. A row held by a latency limit on a step
that hardly grows with the batch has e >> 1: the capacity error there is e times the step's error,
so a 3 % error in the step is a 30 % error in tokens/s at e = 10. With ``--cv FILE`` (the JSON that
``benchmarks/accuracy.py --cv --json X`` writes beside X as X.cv.json) the held-out errors are
split by elasticity.

    python benchmarks/capacity_elasticity.py [--step 0.05] [--cv /tmp/x.cv.json] [--top 15] [--json OUT]

Prints the distribution of e over the frontier rows, by scenario, the most elastic rows and, with
``--cv``, each fold kind's held-out median / p90 absolute error for rows at e <= 2, 2-5 and > 5.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parent.parent
RATE_KEYS = ("exp_rate_tera_per_s", "hbm_bandwidth_tb_s", "link_bandwidth_gb_s", "bandwidth_gb_s", "bandwidth_gbit_s")
TIME_KEYS = ("latency_us", "launch_overhead_us", "step_overhead_ms")
BANDS = ((0.0, 2.0, "e <= 2"), (2.0, 5.0, "2 < e <= 5"), (5.0, math.inf, "e > 5"))


def slower(node, f: float):
    """``node`` (a hardware profile's YAML tree) with every rate divided and every fixed time
    multiplied by ``f``."""
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            if k == "dense_tflops" and isinstance(v, dict):
                out[k] = {p: (None if r is None else r / f) for p, r in v.items()}
            elif k in RATE_KEYS and isinstance(v, (int, float)):
                out[k] = v / f
            elif k in TIME_KEYS and isinstance(v, (int, float)):
                out[k] = v * f
            else:
                out[k] = slower(v, f)
        return out
    if isinstance(node, list):
        return [slower(v, f) for v in node]
    return node


def validate(profiles: Path | None, out: Path) -> dict:
    cmd = [sys.executable, "-m", "infersim"] + (["--profiles-dir", str(profiles)] if profiles else []) + \
          ["validate", "--format", "json", "--out", str(out), "--force"]
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())


def key(r: dict) -> tuple:
    return (r["version"], r["submitter"], r["system"], r["model"], r["scenario"], r["accelerators"])


def stats(errors) -> str:
    a = np.abs(np.asarray(errors, dtype=float))
    if a.size == 0:
        return "   -      -"
    return f"{np.median(a):6.1f} {np.percentile(a, 90):6.1f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--step", type=float, default=0.05, help="relative slowdown of every step (default 0.05)")
    ap.add_argument("--cv", default=None, help="a cross-validation JSON (benchmarks/accuracy.py --cv --json X writes X.cv.json)")
    ap.add_argument("--top", type=int, default=15, help="most elastic rows to list")
    ap.add_argument("--json", default=None, help="write each frontier row's elasticity here")
    a = ap.parse_args(argv)
    if not 0.001 <= a.step <= 0.5:
        ap.error("--step must be in [0.001, 0.5]")
    t0 = time.perf_counter()
    f = 1.0 + a.step
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        hw = tmp / "profiles" / "hardware_profiles"
        hw.mkdir(parents=True)
        for p in sorted((ROOT / "hardware_profiles").glob("*.yaml")):
            (hw / p.name).write_text(yaml.safe_dump(slower(yaml.safe_load(p.read_text()), f), sort_keys=False))
        base = validate(None, tmp / "base.json")
        slow = validate(tmp / "profiles", tmp / "slow.json")
    by_key = {key(r): r for r in slow["results"]}
    rows = []
    for r in base["results"]:
        s = by_key.get(key(r))
        if not r["frontier"] or s is None or not r["predicted_tokens_per_s"] or not s["predicted_tokens_per_s"]:
            continue
        e = math.log(r["predicted_tokens_per_s"] / s["predicted_tokens_per_s"]) / math.log(f)
        rows.append({**{k: r[k] for k in ("version", "submitter", "system", "hardware", "model", "scenario",
                                          "accelerators", "error_pct", "load")}, "elasticity": e})
    e = np.array([r["elasticity"] for r in rows])
    print(f"capacity elasticity to the step time (every step {100 * a.step:g} % slower), {len(rows)} frontier rows")
    print(f"  all        median {np.median(e):5.2f}  p90 {np.percentile(e, 90):5.2f}  max {e.max():6.2f}")
    for sc in ("offline", "server", "interactive"):
        x = np.array([r["elasticity"] for r in rows if r["scenario"] == sc])
        if x.size:
            print(f"  {sc:11s}median {np.median(x):5.2f}  p90 {np.percentile(x, 90):5.2f}  max {x.max():6.2f}  ({x.size} rows)")
    for lo, hi, label in BANDS:
        n = int(np.sum((e > lo) & (e <= hi)))
        print(f"  {label:11s}{n:4d} rows")
    print(f"most elastic rows (in-sample error at the shipped values):")
    for r in sorted(rows, key=lambda r: -r["elasticity"])[: a.top]:
        print(f"  e {r['elasticity']:6.2f}  {r['error_pct']:+6.1f} %  {r['version']} {r['hardware']} x{r['accelerators']} "
              f"{r['model']} {r['scenario']} ({r['submitter']}, {r['load']})")
    if a.cv:
        cv = json.loads(Path(a.cv).read_text())
        el = {(r["version"], r["submitter"], r["system"], r["model"], r["scenario"], r["accelerators"]): r["elasticity"]
              for r in rows}
        print("held-out absolute error by elasticity (median / p90 %)")
        for kind, fold in cv.items():
            held = fold.get("held_out", [])
            cells = []
            for lo, hi, label in BANDS:
                errs = [h["error_pct"] for h in held if h.get("error_pct") is not None
                        and lo < el.get((h["version"], h["submitter"], h["system"], h["model"], h["scenario"],
                                         h["accelerators"]), math.nan) <= hi]
                cells.append(f"{label}: {len(errs):3d} rows {stats(errs)}")
            print(f"  {kind:20s} " + " | ".join(cells))
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    print(f"wall time {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
