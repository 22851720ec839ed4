"""Published effect sizes as tests: each optimization's predicted gain at a published setting.

Every test reproduces a row of shared/reference/effects.md with a stated setting (hardware, model,
lengths, batch or latency target) and checks that the predicted gain — the ratio of two full
predictions, with and without the lever — lands in a band around the published figure.

The band rule is the same for every test: the published value (or range) widened by a factor of
1.25² ≈ 1.5625 each way. A gain is the ratio of two predictions, and DESIGN.md's accuracy target
allows each prediction a 25 % error (frontier p90), so a ratio within that band is as good as the
two predictions are allowed to be. Where the published figure is a gain, the band also keeps the
published direction (> 1).

Tests marked ``xfail(strict=True)`` are effects the model does not reproduce yet; the reason
states the measured value. Strict: when the model comes to reproduce them they fail as XPASS, and
the marker must be removed.
"""

from __future__ import annotations

import pytest

from infersim.api import predict
from infersim.specs import catalog

BAND = 1.25**2
"""Each-way band factor: two predictions, each within the 25 % p90 accuracy target."""


def _band(low: float, high: float | None = None, gain: bool = True) -> tuple[float, float]:
    high = low if high is None else high
    lo, hi = low / BAND, high * BAND
    return (max(lo, 1.0) if gain else lo), hi


def _tps(p, key="tokens_per_s"):
    assert p.feasible, p.reason
    return p.metrics[key]


# ---- section 1: multi-token prediction ------------------------------------------------------------------


def test_mtp_speedup_at_batch_one_matches_trt_llm_blog_1():
    # effects.md section 1, TRT1: 8xB200, DeepSeek-R1 FP4, batch 1, ISL/OSL 1K/2K. Depth 3 with the
    # blog's acceptance (p1 0.92, p2 0.72, p3 0.36 conditional; L = 2.82) raises TPS/user from 111 to
    # 253: 2.28x. Band: [2.28/1.5625, 2.28·1.5625] = [1.46, 3.56]. (Measured 2.04x.)
    args = dict(isl=1024, osl=2048, tp=8, batch=1, round="v6.0")
    base = predict("b200", "deepseek-r1", "batch-1k-1k", 8, disable=["mtp"], **args)
    mtp = predict("b200", "deepseek-r1", "batch-1k-1k", 8, enable=["mtp"],
                  params={"mtp": {"depth": 3, "acceptance": [0.92, 0.72, 0.36]}}, **args)
    assert mtp.config["mtp_depth"] == 3
    gain = _tps(mtp, "tokens_per_s_per_user") / _tps(base, "tokens_per_s_per_user")
    lo, hi = _band(2.28)
    assert lo <= gain <= hi, gain


# ---- section 2: disaggregation ----------------------------------------------------------------------------


def test_disaggregation_gain_matches_trt_llm_blog_5():
    # effects.md section 2, TRT5: GB200, DeepSeek-R1, ISL 4400 / OSL 1200, no MTP, instances of 4-32
    # GPUs: 1.4-1.8x tokens/s/GPU at matched tokens/s/user. Setting here: 32 GB200 GPUs, 50 tokens/s
    # per user (TPOT 20 ms, the TRT5 operating range), MLPerf Interactive TTFT limit.
    # Band: [1.4/1.5625, 1.8·1.5625] = [0.90, 2.81], and > 1 (published direction): [1.0, 2.81].
    # Measured 2.70x (fit of 2026-11-26, third session: the v6.0 Interactive recipe's engine caps, 64
    # sequences per rank on GB200, and its CUTEDSL MoE backend); 0.973x, 1.015x and 0.98x with the
    # three fits before (a strict xfail twice): at 20 ms the aggregated layout sits near the model's
    # latency floor (without MTP: TPOT >= ~19 ms even at a few sequences), so the ratio swings with
    # each fit. At 25/30/40 ms it is now 3.43/2.05/1.11x (the same two predictions at those limits;
    # 2.32/3.28/2.74x before): the model's disaggregation gain at this setting is not yet stable.
    # With the FP4 weight stream fitted on Blackwell (2026-11-27, twelfth session): 3.12x at 20 ms
    # (aggregated 6,454 tokens/s, its decode step slower at a few sequences per rank), 2.89/1.51/0.89x
    # at 25/30/40 ms: over the band's upper edge at the test's 20 ms (a strict xfail then).
    # Since the routed experts take the round's MoE maturity alone (2026-11-27, fourteenth session):
    # 1.68x at 20 ms (aggregated 5,947, disaggregated 10,000 tokens/s), 2.97/1.73/0.87x at 25/30/40 ms.
    sc = catalog.load("scenario", "mlperf-deepseek-r1-interactive")
    sc = sc.model_copy(update={"slo": sc.slo.model_copy(update={"tpot_ms": 20.0})})
    args = dict(isl=4400, osl=1200, round="v6.0")
    disagg = predict("gb200-nvl72", "deepseek-r1", sc, 32, disable=["mtp"], enable=["disagg"], **args)
    agg = predict("gb200-nvl72", "deepseek-r1", sc, 32, disable=["mtp", "disagg"], **args)
    assert disagg.config["disaggregated"] and not agg.config["disaggregated"]
    gain = _tps(disagg) / _tps(agg)
    lo, hi = _band(1.4, 1.8)
    assert lo <= gain <= hi, gain


# ---- section 4: attention DP, expert parallelism, wide EP ------------------------------------------------

_TRT3 = dict(isl=1024, osl=2048, round="v6.0", disable=["mtp"])
"""TRT3 setting: 8xB200, DeepSeek-R1 FP4, ISL/OSL 1K/2K, maximum throughput (offline), no MTP: the
blog's "how to reproduce" points at the B200 max-throughput recipe (NVIDIA/TensorRT-LLM
docs/source/blogs/Best_perf_practice_on_DeepSeek-R1_in_TensorRT-LLM.md), whose trtllm-bench
options set attention DP, CUDA graphs and FP8 KV but no speculative_config (the min-latency recipe
there sets MTP 3), and both levers are measured "keeping all other factors the same"."""


def test_attention_dp_vs_tp_matches_trt_llm_blog_3():
    # effects.md section 4, TRT3: attention DP vs TP +400 % (5x) at max throughput; TP duplicates
    # the MLA KV cache 8x, so concurrency drops from 4000 to 500. Both at EP8 experts.
    # Band: [5/1.5625, 5·1.5625] = [3.2, 7.8]. (Measured 5.05x without MTP, 5.49x with the 18ceddd
    # fit; with the v6.0 preset's MTP searched per layout it was 2.98x: DP8 picks depth 1 and TP8
    # depth 3, and the draft query rows cost DP8's compute-bound attention 1.94x its time (depth 1)
    # but TP8's KV-read-bound attention 1.15x (depth 3): other factors were no longer the same.
    # benchmarks/attention_dp_isolation.py prints both, per refit parameter.)
    dp = predict("b200", "deepseek-r1", "batch-1k-1k", 8, tp=8, ep=8, dp=8, batch=4000, **_TRT3)
    tp = predict("b200", "deepseek-r1", "batch-1k-1k", 8, tp=8, ep=8, dp=1, batch=500, **_TRT3)
    gain = _tps(dp) / _tps(tp)
    lo, hi = _band(5.0)
    assert lo <= gain <= hi, gain


def test_expert_parallel_vs_expert_tp_matches_trt_llm_blog_3():
    # effects.md section 4, TRT3: EP vs TP for the MoE layers +142 % (2.42x) at 1K/2K max
    # throughput, "keeping other factors the same": attention DP8 on both, FP4 MoE weights, FP8 KV,
    # and the blog's concurrency of 4000 (500 per GPU). Band: [2.42/1.5625, 2.42·1.5625] = [1.55, 3.78].
    # Measured 1.58x (2026-11-27, eighteenth session) since the gated attention-DP engine admits the
    # prompts of this throughput run at context iterations (``scheduler.offline``) instead of about
    # one prompt a step on one rank of both layouts; 1.52x (a strict xfail) with the fit that applies the v6.0 MoE maturity (1.49) to the experts' weight
    # stream as well as their MMAs: both layouts stream the same expert bytes per GPU, so the faster
    # stream shrinks the part they share and leaves TP8's all-reduce and K-256 tiles a larger share
    # of a shorter step. Earlier fits: 1.81x, 1.60x, 1.48x (a strict xfail then). Expert TP8 slices the expert
    # down-projection to K 256 (one FP4 k-block per tile against a fixed 4.1, DeepGEMM's H800
    # K-sweep), permutes all 8 rows of every token and all-reduces every token's hidden state.
    ep = predict("b200", "deepseek-r1", "batch-1k-1k", 8, tp=8, ep=8, dp=8, batch=4000, **_TRT3)
    tp = predict("b200", "deepseek-r1", "batch-1k-1k", 8, tp=8, ep=1, dp=8, batch=4000, **_TRT3)
    assert ep.config["weights"] == "fp4" and ep.config["kv_cache"] == "fp8"
    gain = _tps(ep) / _tps(tp)
    lo, hi = _band(2.42)
    assert lo <= gain <= hi, gain


@pytest.fixture(scope="module")
def nvl72_interactive():
    full = predict("gb300-nvl72", "deepseek-r1", "mlperf-deepseek-r1-interactive", 72, round="v6.0")
    narrow = predict("gb300-nvl72", "deepseek-r1", "mlperf-deepseek-r1-interactive", 72, round="v6.0",
                     disable=["wide_ep"])
    return full, narrow


def test_wide_ep_on_nvl72_picks_ep16_or_more(nvl72_interactive):
    # effects.md section 4 (IX listing): NVL72 runs DeepSeek-R1 decode at EP up to 32, where an 8-GPU
    # island caps EP at 8; the MLPerf v6.0 GB300 Interactive decode workers are DEP16
    # (mlperf_submission_configs.md 1d).
    full, narrow = nvl72_interactive
    assert full.config["ep"] >= 16
    assert narrow.config["tp"] * narrow.config["pp"] <= 8 * narrow.config["pp"]  # experts stay inside 8 GPUs


def test_wide_ep_gain_on_nvl72_in_published_direction_and_magnitude(nvl72_interactive):
    # effects.md section 4: spreading the experts wider than an 8-GPU node is worth TRT3's +142 %
    # (EP vs TP, 2.42x) as a single lever, and up to 6.17x together with disaggregation, EPLB and MTP
    # (TRT8, EP16/32 on GB200 NVL72 vs EP4/EP8 baselines). Setting: GB300 NVL72, 72 GPUs, MLPerf
    # Interactive, every other v6.0 lever available; the gain is full search / search without wide EP.
    # Band: [2.42/1.5625, 6.17·1.5625] = [1.55, 9.64]. (Measured: the xfail reason; 1.53x with the
    # previous serving queue, 1.68x with the iteration-level engine model and the 2026-11-22 fit.)
    full, narrow = nvl72_interactive
    gain = _tps(full) / _tps(narrow)
    assert gain > 1.0  # the published direction
    lo, hi = _band(2.42, 6.17)
    assert lo <= gain <= hi, gain


# ---- section 5: computation/communication overlap ---------------------------------------------------------


def _tbo_gain(tokens_per_device: float) -> float:
    from dataclasses import replace

    from infersim import optimizations as opt
    from infersim.api import base_plan
    from infersim.engine import step_cost
    from infersim.graph import Layout, Shape
    from infersim.query import Query

    query = Query.build("h100-sxm", "deepseek-r1", "mlperf-deepseek-r1-server", 72, round="v6.0")
    plan = base_plan(query.inputs, query.software, query.layout)
    plan = opt.apply_all(replace(plan, formats=replace(plan.formats, weights="fp8", activations="fp8")),
                         [opt.make("fusion"), opt.make("attention_dp"), opt.make("wide_ep", {"max_ep": 72})])
    layout = Layout(tp=72, ep=72, dp=72)
    shape = Shape(decode_seqs=tokens_per_device * 72, decode_ctx=2000.0)
    off = float(step_cost(plan, layout, shape).total)
    on = float(step_cost(opt.make("overlap").apply(plan), layout, shape).total)
    return off / on


def test_two_batch_overlap_decode_gain_matches_sglang_large_ep():
    # effects.md section 5, SGL-EP: two-batch overlap in decode on H100 with DeepSeek EP72 over
    # InfiniBand (ISL 2000): +25.5 % at 256 tokens per device. Band: [1.255/1.5625, 1.255·1.5625]
    # and > 1 = [1.0, 1.96]. (Measured 1.28x.)
    gain = _tbo_gain(256.0)
    lo, hi = _band(1.255)
    assert lo < gain <= hi, gain


def test_two_batch_overlap_stays_off_below_break_even():
    # effects.md section 5, SGL-EP: forcing TBO at 32 tokens per device costs 27 %; break-even is at
    # 64-128. The overlap transform leaves the batch unsplit below 128 tokens per device, so the
    # step is exactly what it is without overlap (no published loss, no gain).
    assert _tbo_gain(32.0) == pytest.approx(1.0, rel=1e-12)
