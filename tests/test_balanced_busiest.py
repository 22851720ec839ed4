"""The busiest attention-DP rank's new prompt tokens under the balanced rank router
(``scheduler.busiest_tokens`` with ``router="balanced"``, ``scheduler._balanced_table``).

The router hands each prompt to the rank holding the fewest active prompt tokens (the longest
first, ``des._route``): a rank's N prompts in a period hold (N − 1)·E[ISL] + ISL tokens, its count's
share and one prompt's deviation. The DES comparison is tests/test_scheduler.py's balanced grid;
here the table is checked against a Monte Carlo of that distribution and against the random
router's compound Poisson sums."""

from __future__ import annotations

import numpy as np
import pytest

from infersim import scheduler, serving
from infersim.specs import catalog


@pytest.fixture(scope="module")
def stats():
    return serving.WorkloadStats.from_workload(catalog.load("scenario", "mlperf-llama2-70b-server").workload)


def monte_carlo(stats, m: float, d: int, n: int = 200_000, seed: int = 4) -> float:
    rng = np.random.default_rng(seed)
    counts = rng.poisson(m, size=(n, d))
    one = rng.choice(np.asarray(stats.isl_points), size=counts.shape, p=np.asarray(stats.isl_probs))
    held = np.where(counts >= 1, (counts - 1) * stats.isl_mean + one, 0.0)
    return float(held.max(axis=1).mean())


@pytest.mark.parametrize("m, d", [(0.3, 8), (1.05, 8), (2.79, 8), (6.0, 4), (20.0, 16)])
def test_the_table_is_the_largest_of_d_ranks_holding_one_deviation(stats, m, d):
    got = float(scheduler.busiest_tokens(stats, np.array([m]), np.array([d]), "balanced")[0][0])
    assert got == pytest.approx(monte_carlo(stats, m, d), rel=0.01)


def test_the_lengths_spread_less_than_under_the_random_router(stats):
    m = np.geomspace(0.05, 200.0, 25)
    d = np.full(m.shape, 8)
    bal = scheduler.busiest_tokens(stats, m, d, "balanced")
    rnd = scheduler.busiest_tokens(stats, m, d, "random")
    assert np.all(bal[0] <= rnd[0] * (1 + 1e-9)) and np.all(bal[1] <= rnd[1] * (1 + 1e-9))
    assert np.all(bal[0] >= m * stats.isl_mean)  # never below the mean rank's share
    # a lone prompt in the instance: the busiest rank holds it whole under either router
    lone = scheduler.busiest_tokens(stats, np.array([1e-3]), np.array([8]), "balanced")[0]
    np.testing.assert_allclose(lone, 8e-3 * stats.isl_mean, rtol=0.01)
    # one rank: its own tokens, whatever the router
    for router in ("random", "balanced"):
        np.testing.assert_allclose(scheduler.busiest_tokens(stats, m, np.ones_like(d), router)[0], m * stats.isl_mean)


def test_the_lattice_and_the_normal_tail_meet(stats):
    """Below ``FFT_MAX_COUNT`` prompts per rank the table is exact on the token lattice, above it
    normal: the two agree where they meet."""
    edge = scheduler.FFT_MAX_COUNT
    lo, hi = scheduler.busiest_tokens(stats, np.array([edge * 0.999, edge * 1.001]), np.array([8, 8]), "balanced")[0]
    assert hi == pytest.approx(lo, rel=0.01)
