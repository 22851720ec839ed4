"""Wall and CPU time of ``infersim validate`` (the 442 bundled MLPerf rows), and of a cold
``infersim run``, each in a fresh interpreter. The scheduler's tables are read from the disk cache
(``infersim.table_cache``, filled by a first untimed run) except in the "empty table cache" case.

The development machine is shared, so wall time moves with other users' load; CPU time
(user + sys of the subprocess and its forked workers) is the steadier figure. ``--base TREE``
times another checkout (e.g. a ``git worktree`` of main) alternately with this one, in the same
window, so the two are compared under the same load.

Run: ``python benchmarks/validate_speed.py [--repeats 3] [--base /path/to/main-checkout]``.
Targets: ≤ 5 s wall for ``infersim validate``; ≤ 1 s for a cold ``infersim run``.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

VALIDATE = "from infersim.cli import main; main()"
WORKERS_1 = ("from infersim import accuracy; "
             "accuracy.validate(accuracy.load_rows(accuracy.bundled_data()), workers=1)")


def timed(tree: Path, code: str, args: list[str], cold: bool = False) -> tuple[float, float]:
    """(wall s, CPU s of the child and its workers) of ``python -c code args`` with ``tree`` first on
    the path; ``cold``: with an empty table cache (``infersim.table_cache``)."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    if cold:
        env["INFERSIM_CACHE_DIR"] = tempfile.mkdtemp(prefix="infersim-bench-tables-")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code, *args], env=env, check=True, stdout=subprocess.DEVNULL, cwd="/")
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if cold:
        shutil.rmtree(env["INFERSIM_CACHE_DIR"], ignore_errors=True)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--base", type=Path, help="another checkout to time alternately (before a change)")
    args = ap.parse_args()
    trees = [("this tree", REPO)] + ([("base", args.base.resolve())] if args.base else [])
    validate = ["validate", "--format", "json"]
    cases = [("infersim validate (default workers)", VALIDATE, validate, False),
             ("  same, empty table cache", VALIDATE, validate, True),
             ("validate, workers=1 (one process)", WORKERS_1, [], False),
             ("cold infersim run llama3.1-8b h100-sxm x1", VALIDATE,
              ["run", "-H", "h100-sxm", "-m", "llama3.1-8b", "-s", "mlperf-llama3.1-8b-offline", "-n", "1"], False)]
    print(f"load average at start: {os.getloadavg()[0]:.2f}, cpus: {os.cpu_count()}")
    timed(REPO, VALIDATE, validate)  # fills the table cache for the warm cases
    for title, code, cli, cold in cases:
        runs: dict[str, list[tuple[float, float]]] = {name: [] for name, _ in trees}
        for _ in range(args.repeats):
            for name, tree in trees:  # alternately, so both see the same load
                runs[name].append(timed(tree, code, cli, cold))
        for name, _ in trees:
            walls, cpus = zip(*runs[name])
            print(f"{title:45s} {name:10s} wall best {min(walls):6.2f} s median {sorted(walls)[len(walls) // 2]:6.2f} s"
                  f" | CPU best {min(cpus):6.2f} s median {sorted(cpus)[len(cpus) // 2]:6.2f} s")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
