"""Speed of the array cost path and of one cold prediction.

1. ``engine.step_cost`` (and ``serving.offline``) over an open-mesh grid of ≥ 1,000,000
   configuration points: tp × pp × batch × isl × osl, each axis a 1-D array shaped for
   broadcasting (like ``np.ix_``). Reports points, seconds (best of 3) and points per second.
2. One cold ``predict`` in a fresh interpreter (what ``infersim run`` does), wall time of the
   subprocess, best of 3; plus the CLI itself.

Run: ``python benchmarks/engine_speed.py [--model llama3.1-70b] [--hardware h100-sxm]``.
Targets: ≥ 1 M configurations/s for step_cost; ≤ 1 s for a cold run.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from infersim import serving  # noqa: E402
from infersim.engine import step_cost  # noqa: E402
from infersim.graph import Formats, Layout, Shape  # noqa: E402
from infersim.plan import Plan  # noqa: E402
from infersim.serving import WorkloadStats  # noqa: E402
from infersim.specs import catalog  # noqa: E402

REPEATS = 3


def grid_axes(n_batch: int = 64, n_isl: int = 32, n_osl: int = 32) -> dict[str, np.ndarray]:
    """Open-mesh axes: tp [4], pp [4], batch [n_batch], isl [n_isl], osl [n_osl] (4·4·64·32·32 = 1,048,576)."""
    axes = {
        "tp": np.array([1.0, 2.0, 4.0, 8.0]),
        "pp": np.array([1.0, 2.0, 4.0, 8.0]),
        "batch": np.geomspace(1, 4096, n_batch),
        "isl": np.geomspace(128, 32768, n_isl),
        "osl": np.geomspace(64, 16384, n_osl),
    }
    coords = np.ix_(*axes.values())
    return dict(zip(axes, coords))


def offline_shape(batch, isl, osl) -> Shape:
    """Steady-state offline step: B decodes at mean context isl + osl/2, plus the B/osl prefills
    that replace finished requests."""
    return Shape(decode_seqs=batch, decode_ctx=isl + osl / 2, prefill_seqs=batch / osl, prefill_len=isl,
                 prefill_len_sq=isl * isl)


def best_of(fn, repeats: int = REPEATS) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def time_grid(model_id: str, hardware_id: str) -> None:
    plan = Plan(hardware=catalog.load("hardware", hardware_id), model=catalog.load("model", model_id),
                formats=Formats("fp8", "fp8", "fp8"))
    g = grid_axes()
    layout = Layout(tp=g["tp"], pp=g["pp"])
    shape = offline_shape(g["batch"], g["isl"], g["osl"])
    points = int(np.prod(np.broadcast_shapes(*(a.shape for a in g.values()))))

    seconds, cost = best_of(lambda: step_cost(plan, layout, shape))
    assert cost.total.size == points and np.all(np.isfinite(cost.total))
    print(f"{'step_cost':<16}{model_id:>14} on {hardware_id}: {points:>9,} points in {seconds:6.3f} s "
          f"= {points / seconds / 1e6:5.2f} M configurations/s (best of {REPEATS})")

    isl, osl = g["isl"], g["osl"]
    stats = WorkloadStats(isl_mean=isl, isl_sq=isl * isl, osl_mean=osl, osl_sq=osl * osl,
                          osl_points=np.full(16, 1.0), osl_probs=np.full(16, 1 / 16), osl_p99=osl)
    seconds, res = best_of(lambda: serving.offline(plan, layout, g["batch"], stats))
    assert np.broadcast_to(res.tokens_per_s, cost.total.shape).size == points
    print(f"{'serving.offline':<16}{model_id:>14} on {hardware_id}: {points:>9,} points in {seconds:6.3f} s "
          f"= {points / seconds / 1e6:5.2f} M configurations/s (best of {REPEATS})")


PREDICT = ("from infersim.api import predict; "
           "p = predict('h100-sxm', None, 'mlperf-llama3.1-8b-offline', 1); "
           "print(round(p.metrics['tokens_per_s'], 1))")


def time_cold(argv: list[str], label: str) -> None:
    walls = []
    out = ""
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True)
        walls.append(time.perf_counter() - t0)
        if proc.returncode != 0:
            print(f"{label}: exit code {proc.returncode}: {proc.stderr.strip().splitlines()[-1:]}")
            return
        out = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
        out = out if out.replace(".", "", 1).isdigit() else ""  # show the predict one-liner's number only
    print(f"{label}: {min(walls):.3f} s wall (best of {REPEATS}; runs {', '.join(f'{w:.2f}' for w in walls)})"
          + (f" → {out} tokens/s" if out else ""))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", action="append", help="model IDs (default: llama3.1-70b and deepseek-r1)")
    ap.add_argument("--hardware", default="h100-sxm")
    ap.add_argument("--no-cold", action="store_true", help="skip the subprocess timings")
    args = ap.parse_args()
    for model_id in args.model or ["llama3.1-70b", "deepseek-r1"]:
        time_grid(model_id, args.hardware)
    if not args.no_cold:
        time_cold([sys.executable, "-c", "pass"], "python startup (baseline)      ")
        time_cold([sys.executable, "-c", PREDICT], "cold predict llama3.1-8b x1    ")
        time_cold([sys.executable, "-m", "infersim", "run", "-H", "h100-sxm", "-s", "mlperf-llama3.1-8b-offline",
                   "-n", "1"], "cold `infersim run` CLI        ")


if __name__ == "__main__":
    main()
