"""CLI fuzz benchmark: run N generated command lines and print what happened.

    python benchmarks/fuzz.py [--examples 10000] [--timeout 20] [--seed 0] [--show 5]

Each example is one CLI invocation drawn by tests/fuzzing.py (valid IDs and flags with odd
values mixed in, mutated profiles, traces, data CSVs, FIFOs, devices, folders, existing files as
outputs) run in process against a scratch copy of the bundled profiles, with a per-example
timeout. Prints the count of each exit code, hangs, internal errors (exit 3 or an uncaught
exception) and every other broken property (traceback, bad JSON number, changed input file),
with the first few command lines of each kind. Exit status 1 when any problem was found.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402

from fuzzing import argvs, workspace  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=10_000)
    ap.add_argument("--timeout", type=float, default=20.0, help="seconds per example before it counts as a hang")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--show", type=int, default=5, help="command lines shown per kind of problem")
    args = ap.parse_args()

    codes: Counter = Counter()
    problems: dict[str, list] = {}
    times: list[float] = []
    t0 = time.perf_counter()
    with workspace(timeout_s=args.timeout) as ws:
        @seed(args.seed)
        @settings(max_examples=args.examples, deadline=None, database=None, phases=[Phase.generate],
                  suppress_health_check=list(HealthCheck))
        @given(argvs(ws))
        def one(argv):
            o = ws.run(argv)
            codes["hang" if o.hang else o.code] += 1
            times.append(o.seconds)
            for p in o.problems:
                if o.where:
                    kind = f"internal error at {o.where}" + (" (known, reported)" if o.known_bug else "")
                else:
                    kind = p.split(":")[0]
                problems.setdefault(kind, []).append((argv, p))
            n = sum(codes.values())
            if n % 1000 == 0:
                print(f"  {n:,} examples, {time.perf_counter() - t0:,.0f} s", file=sys.stderr, flush=True)

        one()
    total = sum(codes.values())
    wall = time.perf_counter() - t0
    times.sort()
    print(f"examples: {total:,} in {wall:,.1f} s ({total / wall:,.1f}/s); per example median "
          f"{times[len(times) // 2] * 1e3:,.0f} ms, max {times[-1]:,.2f} s")
    for key in (0, 1, 2, 3, "hang"):
        print(f"  exit {key}: {codes.get(key, 0):,}" if key != "hang" else f"  hangs: {codes.get(key, 0):,}")
    print("  (exit 3 = an internal error: the exception escaped the command; located below)")
    other = {k: v for k, v in codes.items() if k not in (0, 1, 2, 3, "hang")}
    if other:
        print(f"  other exit codes: {dict(other)}")
    n_internal = sum(len(v) for k, v in problems.items() if k.startswith("internal"))
    n_known = sum(len(v) for k, v in problems.items() if k.startswith("internal") and k.endswith("(known, reported)"))
    print(f"internal errors: {n_internal:,} (of which in known, reported bugs: {n_known:,})")
    print(f"problems: {sum(len(v) for v in problems.values()):,}")
    for kind, items in sorted(problems.items(), key=lambda kv: -len(kv[1])):
        print(f"  {kind}: {len(items):,}")
        for argv, p in items[: args.show]:
            print(f"    {' '.join(repr(a) if (' ' in a or not a) else a for a in argv)[:300]}")
            print(f"      -> {p[:300]}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
