"""des.simulate_engine's waiting-queue policy: shortest prompt first (vLLM --scheduling-policy=sjf,
every v6.0 Qwen3-VL recipe) against arrival order, and the end-to-end latency it reports."""

from __future__ import annotations

import numpy as np
import pytest

from infersim import des
from infersim.plan import Engine

ISL = (np.array([200.0, 800.0, 4000.0]), np.array([0.5, 0.4, 0.1]))
OSL = (np.array([20.0, 40.0, 60.0]), np.array([0.3, 0.4, 0.3]))
ENGINE = Engine(max_batch_size=512, max_num_tokens=2048, chunked_prefill=True)


def decode_time(rows):
    return 0.010 + 50e-6 * np.asarray(rows, dtype=float)


def run(rate, policy):
    return des.simulate_engine(rate, 1, ENGINE, decode_time, 20e-6, ISL, OSL, n_requests=6000, seed=2, policy=policy)


def test_shortest_first_cuts_the_mean_wait_and_stretches_the_long_prompts_tail():
    # near the token budget's capacity (mean prompt 820 tokens, ~2,000 per ~55 ms iteration: ~44 prompts/s)
    # prompts queue; SJF serves the short ones first: a lower mean TTFT, a higher p99 (the 4,000-token
    # prompts wait behind them)
    fcfs, sjf = run(41.0, "fcfs"), run(41.0, "sjf")
    assert fcfs.ttft_mean > 0.2  # the queue is real at this load
    assert sjf.ttft_mean < 0.8 * fcfs.ttft_mean
    assert sjf.ttft_p > fcfs.ttft_p
    assert sjf.tokens_per_s == pytest.approx(fcfs.tokens_per_s, rel=0.03)  # the same work gets done


def test_light_load_policies_agree_and_e2e_spans_ttft_and_decode():
    fcfs, sjf = run(3.0, "fcfs"), run(3.0, "sjf")
    assert sjf.e2e_mean == pytest.approx(fcfs.e2e_mean, rel=0.02)
    for r in (fcfs, sjf):
        # a request lives its TTFT plus OSL - 1 decode iterations (mean OSL 40, >= 10 ms each)
        assert r.e2e_mean > r.ttft_mean + 39 * 0.010
        assert r.e2e_p >= r.e2e_p50 > 0


def test_unknown_policy_is_rejected():
    with pytest.raises(ValueError, match="policy"):
        run(3.0, "lifo")
