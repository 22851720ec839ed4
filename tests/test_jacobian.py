"""The fit's Jacobian: grouped finite differences and secant (Schubert) updates."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import least_squares

from infersim.accuracy.jacobian import SecantJacobian, column_groups, forward_difference, schubert_update


def banded(n_rows: int = 12, n_cols: int = 8, seed: int = 0) -> np.ndarray:
    """A sparsity pattern like the fit's: each row sees its own block of columns and a shared one."""
    rng = np.random.default_rng(seed)
    s = rng.random((n_rows, n_cols)) < 0.3
    s[:, 0] |= np.arange(n_rows) % 2 == 0
    s[np.arange(n_rows), np.arange(n_rows) % n_cols] = True
    return s


def test_groups_cover_every_column_once_and_never_share_a_row():
    s = banded()
    groups = column_groups(s)
    assert sorted(j for g in groups for j in g) == list(range(s.shape[1]))
    for g in groups:
        assert (s[:, g].sum(axis=1) <= 1).all()
    assert len(groups) >= s.sum(axis=1).max()  # no grouping beats the densest row
    assert len(column_groups(np.eye(5, dtype=bool))) == 1


def test_grouped_difference_is_exact_for_a_linear_map_in_one_call_per_group():
    s = banded()
    a = np.where(s, np.random.default_rng(1).normal(size=s.shape), 0.0)
    calls = []

    def fun(x):
        calls.append(x.copy())
        return a @ x

    x = np.full(s.shape[1], 0.5)
    x[3] = 0.99  # a step past the upper bound goes the other way
    jac = forward_difference(fun, x, a @ x, s, 0.05)
    assert np.allclose(jac, a, atol=1e-12)
    assert len(calls) == len(column_groups(s))
    assert all(((c >= 0) & (c <= 1)).all() for c in calls)


def test_schubert_update_meets_the_secant_condition_inside_the_pattern():
    rng = np.random.default_rng(2)
    s = banded()
    jac = np.where(s, rng.normal(size=s.shape), 0.0)
    dx = np.zeros(s.shape[1])
    dx[[0, 2, 5]] = rng.normal(size=3)
    df = rng.normal(size=s.shape[0])
    new = schubert_update(jac, s, dx, df)
    moved = (s[:, [0, 2, 5]]).any(axis=1)
    assert np.allclose((new @ dx)[moved], df[moved])
    assert np.array_equal(new[~moved], jac[~moved])  # rows whose columns did not move keep their slopes
    assert not new[~s].any()  # the pattern is kept


def test_secant_fit_reaches_the_difference_fits_optimum_with_fewer_evaluations():
    """A separable nonlinear least-squares problem with the fit's kind of sparsity."""
    s = banded(40, 10, seed=3)
    rng = np.random.default_rng(4)
    a = np.where(s, rng.uniform(0.5, 1.5, size=s.shape), 0.0)
    target = rng.uniform(0.2, 0.8, size=s.shape[1])

    def residuals(x):
        return np.log((a @ np.exp(x)) / (a @ np.exp(target)))

    counts = {}

    def counted(name):
        def fun(x):
            counts[name] = counts.get(name, 0) + 1
            return residuals(x)
        return fun

    x0 = np.full(s.shape[1], 0.5)
    ref = least_squares(counted("difference"), x0, jac="2-point", jac_sparsity=s, bounds=(0, 1), method="trf",
                        diff_step=0.05, x_scale=1.0, max_nfev=20, ftol=1e-10, xtol=1e-10)
    jac = SecantJacobian(counted("secant"), s, 0.05)
    sec = least_squares(jac.tracked, x0, jac=jac, bounds=(0, 1), method="trf", x_scale=1.0, max_nfev=20,
                        ftol=1e-10, xtol=1e-10)
    assert np.abs(ref.fun).max() < 1e-4 and np.abs(sec.fun).max() < 1e-4
    assert jac.differences == 1 and jac.updates >= 1
    assert counts["secant"] < counts["difference"]


def test_a_refresh_forms_the_difference_again():
    s = np.eye(3, dtype=bool)
    calls = []

    def fun(x):
        calls.append(1)
        return x ** 2

    jac = SecantJacobian(fun, s, 0.01, refresh=1)
    for x in (np.full(3, 0.2), np.full(3, 0.4), np.full(3, 0.6)):
        jac.tracked(x)
        j = jac(x)
    assert jac.differences == 2 and jac.updates == 0  # difference, update, difference again
    assert np.allclose(np.diag(j), 2 * 0.6 + 0.01, atol=1e-9)


@pytest.mark.parametrize("bad", ["newton", "Secant"])
def test_an_unknown_jacobian_is_refused(bad):
    from infersim import accuracy
    from infersim.errors import SpecError

    with pytest.raises(SpecError, match="jacobian"):
        accuracy.calibrate([], jacobian=bad)


def test_a_search_without_disaggregation_reads_the_full_search_where_that_stayed_aggregated():
    from infersim.accuracy.data import PredictionKey
    from infersim.accuracy.runner import Lock, Runner

    key = PredictionKey("v6.0", "h200-sxm", "llama3.1-8b", "mlperf-llama3.1-8b-server", 8)
    no_disagg = Lock((), ("disagg",), 0, None)
    run = Runner()
    full = run.predict(key)
    assert full.lock.layout is not None and "disagg" in full.lock.disable
    assert run.predict(key, (), (), no_disagg) is full and run.calls == 1  # read, not searched again
    assert Runner().predict(key, (), (), no_disagg) == full  # the same as searching it
    # a search that must apply what the full search switched off is not read from it
    assert run._lookup(run._ckey((key, (), (), Lock(("disagg",), (), 0, None)))) is None


def test_a_disaggregated_choice_is_pinned_with_its_split():
    from infersim.accuracy.data import PredictionKey
    from infersim.accuracy.runner import Runner

    key = PredictionKey("v6.0", "gb300-nvl72", "llama3.1-405b", "mlperf-llama3.1-405b-server", 72)
    full = Runner().predict(key)
    lock = full.lock
    assert "disagg" in lock.enable and lock.layout is not None and lock.disagg is not None
    size, p, d = lock.disagg
    tp, pp = lock.layout[:2]
    assert p >= 1 and d >= 1 and p * size + d * tp * pp <= key.accelerators
    pinned = Runner().predict(key, (), (), lock)
    assert pinned.value == pytest.approx(full.value, rel=1e-9) and pinned.lock == lock  # the same choice, priced
    # the pinned split is used: one decode worker fewer serves less
    fewer = Runner().predict(key, (), (), lock._replace(disagg=(size, p, d - 1)))
    assert fewer.value is not None and fewer.value < full.value * (1 - 1e-6)
    # an operating point needs an aggregated layout: a disaggregated lock is refused, not misread
    out = Runner().predict(key, (), (), lock, 100.0)
    assert out.value is None and "aggregated layout" in out.reason


def test_remembered_outcomes_are_read_and_unknown_ones_are_priced():
    from infersim.accuracy.data import PredictionKey
    from infersim.accuracy.runner import Outcome, Runner

    key = PredictionKey("v6.0", "h200-sxm", "llama3.1-8b", "mlperf-llama3.1-8b-server", 8)
    run = Runner()
    marker = Outcome(1.0, "", None)
    run.remember((key, (("compute_fraction", 0.5),), ()), marker)
    assert run.predict_many([(key, (("compute_fraction", 0.5),), ())]) == [marker] and run.calls == 0
