"""Where the at-load TTFT p99 median sits and how robust it is (issue 10, TTFT target 0.3 s).

    python benchmarks/ttft_knife_edge.py [--data FILE] [--report AT_LOAD.json]

Reads ``infersim validate --at-load --format json`` output (``--report``) or runs the same
validation on ``--data`` (default: the bundled operating points). Prints:
- the summary: median |TTFT p99 error|, rows within 0.3 s and how many more the target needs;
- per group (round, model, hardware, stack, scenario): rows, median signed TTFT p99 error, the
  measured and predicted p99 and p50 and p99/p50 (a queue that waits for a token budget or an
  admission gate has a long tail: large p99/p50);
- the rows around the median (the knife edge: which rows a small change moves across it);
- sensitivity: the median if every predicted p99 were scaled by (1 + f), and the same per model:
  how far each group's p99 would have to move for the target. A steep change under a few per cent
  means the figure is set by where a group of rows happens to sit, not by a mechanism.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics

TARGET_S = 0.3
SCALES = (-0.15, -0.10, -0.05, -0.02, 0.0, 0.02, 0.05, 0.10)


def stack_of(row) -> str:
    """Serving stack of a run, from its submitter and hardware (AMD hardware: vLLM; else TensorRT-LLM)."""
    return "vllm" if row["hardware"].startswith("mi") else "trtllm"


def load_rows(args) -> list[dict]:
    if args.report:
        with open(args.report, encoding="utf-8") as f:
            rep = json.load(f)
    else:
        from infersim import at_load as al

        rep = al.validate(args.data or al.bundled_data())
    return [r for r in rep["per_row"] if r.get("ttft_p99_error_s") is not None]


def median_abs(rows, scale=lambda r: 1.0) -> tuple[float, int]:
    err = [abs(r["predicted"]["ttft_p99_ms"] * scale(r) - r["measured"]["ttft_p99_ms"]) / 1e3 for r in rows]
    return statistics.median(err), sum(e <= TARGET_S for e in err)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=None)
    ap.add_argument("--report", default=None, help="an `infersim validate --at-load --format json` output")
    args = ap.parse_args()
    rows = load_rows(args)
    med, within = median_abs(rows)
    need = len(rows) // 2 + 1
    print(f"rows {len(rows)}  median |TTFT p99 error| {med:.3f} s  within {TARGET_S} s: {within} "
          f"(the target needs {need}: {max(need - within, 0)} more)\n")

    groups = collections.defaultdict(list)
    for r in rows:
        groups[(r["version"], r["model"], r["hardware"], stack_of(r), r["scenario"])].append(r)
    print(f"{'round':5} {'model':14} {'hardware':12} {'stack':6} {'scenario':11} {'n':>3} {'err med s':>9} "
          f"{'in 0.3':>6} {'p99 meas':>8} {'pred':>6} {'p50 meas':>8} {'pred':>6} {'p99/p50 meas':>12} {'pred':>5}")
    for k, v in sorted(groups.items(), key=lambda kv: statistics.median(r["ttft_p99_error_s"] for r in kv[1])):
        m = lambda key, side: statistics.median(r[side][key] for r in v) / 1e3  # noqa: E731
        e = statistics.median(r["ttft_p99_error_s"] for r in v)
        inside = sum(abs(r["ttft_p99_error_s"]) <= TARGET_S for r in v)
        print(f"{k[0]:5} {k[1]:14} {k[2]:12} {k[3]:6} {k[4]:11} {len(v):3d} {e:+9.2f} {inside:6d} "
              f"{m('ttft_p99_ms', 'measured'):8.2f} {m('ttft_p99_ms', 'predicted'):6.2f} "
              f"{m('ttft_p50_ms', 'measured'):8.2f} {m('ttft_p50_ms', 'predicted'):6.2f} "
              f"{m('ttft_p99_ms', 'measured') / m('ttft_p50_ms', 'measured'):12.1f} "
              f"{m('ttft_p99_ms', 'predicted') / m('ttft_p50_ms', 'predicted'):5.1f}")

    print("\nrows around the median (sorted by |error|):")
    order = sorted(rows, key=lambda r: abs(r["ttft_p99_error_s"]))
    mid = len(order) // 2
    for r in order[max(mid - 12, 0): mid + 12]:
        print(f"  {r['ttft_p99_error_s']:+.3f} s  {r['version']} {r['model']:14} {r['hardware']:12} "
              f"{r['scenario']:11} {r['submitter']}")

    print("\nsensitivity: every predicted p99 × (1 + f)")
    for f in SCALES:
        med_f, within_f = median_abs(rows, lambda r, f=f: 1.0 + f)
        print(f"  f {f:+.2f}: median {med_f:.3f} s, within {within_f}")
    print("per model (only that model's p99 scaled):")
    for model in sorted({r["model"] for r in rows}):
        line = []
        for f in (-0.10, -0.05, 0.05, 0.10):
            med_f, _ = median_abs(rows, lambda r, f=f: 1.0 + f if r["model"] == model else 1.0)
            line.append(f"{f:+.2f}: {med_f:.3f}")
        print(f"  {model:16} " + "  ".join(line))


if __name__ == "__main__":
    main()
