"""Pinned disaggregated pools (``--set disagg.prefill_workers=P --set disagg.decode_workers=D``,
``disagg.prefill_tp``): a deployment's own split instead of rate matching. NVIDIA's v6.0 GB300 x72
llama2-70b Server ran 28 prefill + 44 decode TP1 workers (mlperf_engine_settings.csv)."""

from __future__ import annotations

import pytest

from infersim import api
from infersim.errors import InfeasibleError

ARGS = ("gb300-nvl72", "llama2-70b", "mlperf-llama2-70b-server", 72)


def _pinned(**params):
    return api.predict(*ARGS, round="v6.0", enable=["disagg"], params={"disagg": params})


@pytest.fixture(scope="module")
def free():
    p = api.predict(*ARGS, round="v6.0", enable=["disagg"])
    assert p.feasible and p.config["disaggregated"]
    return p


def test_both_counts_pinned_are_kept_and_never_beat_rate_matching(free):
    p = _pinned(prefill_workers=28, decode_workers=44)
    assert p.feasible and (p.config["prefill_workers"], p.config["decode_workers"]) == (28, 44)
    assert (free.config["prefill_workers"], free.config["decode_workers"]) != (28, 44)
    # the rate-matched search tries this split too (it is inside its window), so it is at least as good
    assert p.metrics["tokens_per_s"] <= free.metrics["tokens_per_s"] * (1 + 1e-9)
    assert p.config["idle_accelerators"] == 72 - 28 * p.config["prefill_layout"]["tp"] - 44 * p.config["tp"]


def test_one_count_pinned_gives_the_other_pool_the_rest(free):
    d = _pinned(decode_workers=40)
    assert d.config["decode_workers"] == 40
    assert d.config["prefill_workers"] == (72 - 40 * d.config["tp"]) // d.config["prefill_layout"]["tp"]
    p = _pinned(prefill_workers=20)
    assert p.config["prefill_workers"] == 20
    assert p.config["decode_workers"] == (72 - 20 * p.config["prefill_layout"]["tp"]) // p.config["tp"]
    for q in (d, p):
        assert q.metrics["tokens_per_s"] <= free.metrics["tokens_per_s"] * (1 + 1e-9)


def test_prefill_worker_size_pinned():
    p = _pinned(prefill_tp=2, decode_workers=40)
    c = p.config
    assert p.feasible and c["prefill_layout"]["tp"] * c["prefill_layout"]["pp"] == 2
    assert c["prefill_workers"] == (72 - 40 * c["tp"]) // 2


def test_a_split_larger_than_the_system_is_a_layout_error():
    with pytest.raises(InfeasibleError, match="divides the heads/experts/accelerators"):
        api.predict(*ARGS, round="v6.0", enable=["disagg"], params={"disagg": {"prefill_workers": 40,
                                                                               "decode_workers": 44}},
                    raise_infeasible=True)


def test_pinned_pools_at_a_load():
    """``--qps`` runs the pinned pools: the prefill utilization is λ over the 28 workers' rate."""
    p = api.predict(*ARGS, round="v6.0", enable=["disagg"], params={"disagg": {"prefill_workers": 28,
                                                                              "decode_workers": 44}}, qps=3000.0)
    assert p.feasible and (p.config["prefill_workers"], p.config["decode_workers"]) == (28, 44)
    assert p.metrics["requests_per_s"] == 3000.0 and 0 < p.metrics["occupancy"]


def test_a_prefill_size_no_layout_takes_is_a_layout_error():
    """64 query heads do not split over 3 GPUs: no prefill worker of that size exists."""
    with pytest.raises(InfeasibleError, match="divides the heads/experts/accelerators"):
        api.predict(*ARGS, round="v6.0", enable=["disagg"], params={"disagg": {"prefill_tp": 3}}, raise_infeasible=True)
