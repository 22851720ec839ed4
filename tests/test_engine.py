"""Step costing (infersim.engine.step_cost): hand-computed roofline cases, physical properties
(bandwidth, peak FLOPs, batch), and the vectorization safety net (array path == scalar path).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from infersim import parallel, serving
from infersim.engine import stage_graph, step_cost
from infersim.graph import Formats, Layout, Shape
from infersim.plan import Plan
from infersim.serving import WorkloadStats

import strategies as S

BF16 = Formats("bf16", "bf16", "bf16")
H100 = S.pinned(S.hardware("h100-sxm"))  # hand computations below use the pinned efficiencies
LLAMA8B = S.model("llama3.1-8b")
LLAMA8B_H100 = Plan(hardware=H100, model=LLAMA8B, formats=BF16)

# ---- hand-computed cases: Llama 3.1 8B on one H100 SXM, bf16 ---------------------------------------------
# Weights streamed per decode step: linear 6,979,321,856 params + LM head 525,336,576, 2 B each
#   = 15,009,316,864 B (the embedding table is looked up one row per token, not streamed).
STREAMED_WEIGHT_BYTES = 15_009_316_864
# H100 SXM: 3.35 TB/s HBM, memory_fraction 0.8 → 2.68e12 B/s achievable.
ACHIEVABLE_BW = 0.8 * 3.35e12
# Kernels per step at tp = 1 (collectives over a group of 1 launch nothing): per layer input_norm,
# post_attn_norm, 2 residual adds, qkv_proj, rope, attention, o_proj, gate_up, act, down = 11;
# plus embedding, final_norm, lm_head, sampling = 4 → 32·11 + 4 = 356 kernels at 4 µs = 1.424 ms;
# host/scheduler overhead 0.5 ms per step.
OVERHEAD_S = 356 * 4e-6 + 0.5e-3


def test_llama8b_decode_batch1_is_memory_bound_weight_streaming():
    # batch 1 at context 1024: KV read 1024 · 131,072 B = 134,217,728 B
    #   memory time (15,009,316,864 + 134,217,728) B / 2.68e12 B/s = 5.6506 ms
    #   + overhead 1.924 ms → expected step ≈ 7.575 ms (activations add < 0.01 %)
    cost = step_cost(LLAMA8B_H100, Layout(), Shape(decode_seqs=1, decode_ctx=1024))
    t = float(cost.total)
    weights_only = STREAMED_WEIGHT_BYTES / ACHIEVABLE_BW  # 5.6005 ms
    expected = (STREAMED_WEIGHT_BYTES + 134_217_728) / ACHIEVABLE_BW + OVERHEAD_S
    assert expected == pytest.approx(7.575e-3, rel=1e-3)
    assert t >= weights_only
    assert t >= LLAMA8B.weight_bytes("bf16") / ACHIEVABLE_BW  # 16.06 GB incl. the embedding: 5.99 ms
    assert t == pytest.approx(expected, rel=0.05)
    # GEMM time alone is weight streaming (activations at batch 1 are ~0.03 % of the bytes)
    assert float(cost.by_kind["gemm"]) == pytest.approx(weights_only, rel=0.01)
    # every compute op is memory-bound at batch 1
    assert float(cost.memory_bound) > 0 and float(cost.compute_bound) < 0.01 * float(cost.memory_bound)


def test_llama8b_prefill_8k_is_compute_bound():
    # one 8192-token prompt. GEMM FLOPs 2 · 8192 · 6,979,321,856 = 1.14350e14 at
    #   η = 0.803 · 8192 / (8192 + 32) = 0.79988 of 989.4 TFLOP/s → 0.14449 s,
    #   + LM head on the last token only (memory-bound: 1,050,673,152 B / 2.68e12 = 0.392 ms).
    # Attention: causal pairs ½(8192² + 8192) = 33,558,528; FLOPs 4 · pairs · 32 heads · 128 · 32 layers
    #   = 1.75935e13 at 0.5 · 989.4e12 → 0.035566 s.
    shape = Shape(prefill_seqs=1, prefill_len=8192, prefill_len_sq=8192.0**2)
    cost = step_cost(LLAMA8B_H100, Layout(), shape)
    gemm_expected = 2 * 8192 * 6_979_321_856 / (0.803 * 8192 / 8224 * 989.4e12) + 1_050_673_152 / ACHIEVABLE_BW
    attention_expected = 4 * 33_558_528 * 32 * 128 * 32 / (0.5 * 989.4e12)
    assert float(cost.by_kind["gemm"]) == pytest.approx(gemm_expected, rel=0.01)
    assert float(cost.by_kind["attention"]) == pytest.approx(attention_expected, rel=0.01)
    assert float(cost.compute_bound) > float(cost.memory_bound)
    assert float(cost.compute_bound) > 0.8 * float(cost.total)


def test_tensor_parallel_adds_all_reduce_time():
    # tp = 8 on one NVLink node: 2 all-reduces per layer of a 1 · 4096 · 2 B = 8192 B payload;
    # ring: 2 · 7/8 · 8192 / 3.6e11 = 3.98e-8 s + 10 µs latency each → 64 · 10.04 µs = 0.6425 ms
    cost = step_cost(LLAMA8B_H100, Layout(tp=8), Shape(decode_seqs=1, decode_ctx=1024))
    assert float(cost.by_kind["comm"]) == pytest.approx(64 * (2 * 7 / 8 * 8192 / 3.6e11 + 10e-6), rel=1e-6)
    assert float(cost.comm_exposed) == pytest.approx(float(cost.by_kind["comm"]))


def test_pipeline_step_is_pp_stage_times():
    # pp stages of layers/pp each process pp micro-batches of batch/pp: the full step takes pp stage
    # times; the per-step host overhead (0.5 ms) is paid once per micro-batch. Kernels per stage:
    # 16 layers · 11 + 4 head kernels / 2 + a pipeline send on (pp − 1)/pp = ½ of the micro-batches
    # = 178.5 → overhead 2 · (0.5 ms + 178.5 · 4 µs) = 2.428 ms.
    shape = Shape(decode_seqs=64, decode_ctx=2048)
    one = step_cost(LLAMA8B_H100, Layout(), shape)
    two = step_cost(LLAMA8B_H100, Layout(pp=2), shape)
    assert float(two.by_kind["overhead"]) == pytest.approx(2 * (0.5e-3 + 178.5 * 4e-6), rel=1e-9)
    # per-token work splits over the stages (each device runs half the layers for all 64
    # sequences): attention (KV reads, linear in sequences) halves exactly ...
    assert float(two.by_kind["attention"]) == pytest.approx(float(one.by_kind["attention"]) / 2, rel=1e-12)
    # ... but each micro-batch re-reads its stage's weights, so weight streaming does not:
    # 2 micro-batches · 7.5 GB / 2.68e12 B/s ≈ the 5.6 ms of pp = 1 (activations halve: −1 %)
    assert float(two.by_kind["gemm"]) == pytest.approx(float(one.by_kind["gemm"]), rel=0.02)


def test_overlap_scheduler_hides_the_host_overhead_behind_the_gpu_step():
    # With the overlap scheduler (TensorRT-LLM PyTorch backend) the host prepares the next iteration
    # while the GPU runs this one: the per-step host cost shows only where it exceeds the GPU's
    # stage. Batch 1 at context 1024 (first hand case): GPU stage = step − 0.5 ms host.
    from infersim.plan import Engine

    shape = Shape(decode_seqs=1, decode_ctx=1024)
    off = step_cost(LLAMA8B_H100, Layout(), shape)
    on_plan = replace(LLAMA8B_H100, engine=Engine(overlap_scheduler=True))
    on = step_cost(on_plan, Layout(), shape)
    assert float(on.total) == pytest.approx(float(off.total) - 0.5e-3, rel=1e-12)
    assert float(on.by_kind["overhead"]) == pytest.approx(float(off.by_kind["overhead"]) - 0.5e-3, rel=1e-12)
    # a host cost longer than the GPU's stage is what the step then lasts
    slow_host = H100.model_copy(update={"efficiency": H100.efficiency.model_copy(update={"step_overhead_ms": 50.0})})
    gpu = float(off.total) - 0.5e-3
    long = step_cost(replace(on_plan, hardware=slow_host), Layout(), shape)
    assert float(long.total) == pytest.approx(50e-3, rel=1e-12)
    assert float(step_cost(replace(LLAMA8B_H100, hardware=slow_host), Layout(), shape).total) == \
        pytest.approx(gpu + 50e-3, rel=1e-12)


def test_overlap_scheduler_is_an_engine_setting_of_the_presets():
    from infersim.optimizations.presets import load_preset

    spec = load_preset("v6.0")
    assert not spec.engine_for("deepseek-r1", "server").overlap_scheduler  # the bundled presets leave it off
    on = spec.model_copy(update={"engine": spec.engine.model_copy(
        update={"default": spec.engine.default.model_copy(update={"overlap_scheduler": True})})})
    assert on.engine_for("deepseek-r1", "server").overlap_scheduler
    assert on.engine_for("llama2-70b", "server").overlap_scheduler


def test_by_kind_sums_to_total():
    cost = step_cost(LLAMA8B_H100, Layout(tp=2), Shape(decode_seqs=8, decode_ctx=4096, prefill_seqs=0.1,
                                                       prefill_len=1000, prefill_len_sq=1e6))
    assert sum(float(v) for v in cost.by_kind.values()) == pytest.approx(float(cost.total), rel=1e-12)


# ---- properties -----------------------------------------------------------------------------------------


@given(plan=S.plans(), batch=S.batches, ctx=S.contexts, factor=st.floats(1.0, 4.0), data=st.data())
@S.examples(40)
def test_more_hbm_bandwidth_never_slows_decode(plan, batch, ctx, factor, data):
    hw = plan.hardware
    faster_hw = S.with_bandwidth(hw, hw.memory.hbm_bandwidth_tb_s * factor)
    assert faster_hw.memory.bandwidth == pytest.approx(hw.memory.bandwidth * factor)  # the change took
    layout = data.draw(S.layouts_for(plan.model))
    shape = Shape(decode_seqs=batch, decode_ctx=ctx)
    t = float(step_cost(plan, layout, shape).total)
    t_fast = float(step_cost(replace(plan, hardware=faster_hw), layout, shape).total)
    assert t_fast <= t * (1 + 1e-12)
    if batch == 1 and factor > 1.01:
        assert t_fast < t  # batch-1 decode streams weights: strictly faster


@given(plan=S.plans(), prompt=S.prompt_lengths, seqs=st.sampled_from([1.0, 2.0, 8.0]),
       factor=st.floats(1.0, 4.0), data=st.data())
@S.examples(40)
def test_more_peak_flops_never_slows_prefill(plan, prompt, seqs, factor, data):
    faster_hw = S.with_flops_scaled(plan.hardware, factor)
    assert faster_hw.compute.flop_rate("bf16") == pytest.approx(plan.hardware.compute.flop_rate("bf16") * factor)
    layout = data.draw(S.layouts_for(plan.model))
    shape = Shape(prefill_seqs=seqs, prefill_len=prompt, prefill_len_sq=prompt * prompt)
    t = float(step_cost(plan, layout, shape).total)
    t_fast = float(step_cost(replace(plan, hardware=faster_hw), layout, shape).total)
    assert t_fast <= t * (1 + 1e-12)


@given(plan=S.plans(), scenario_id=S.scenario_ids, data=st.data())
@S.examples(40)
def test_larger_feasible_batch_never_lowers_offline_throughput(plan, scenario_id, data):
    # tokens/s = B·L / t(B) on a fixed layout, over every batch that fits the KV cache
    layout = data.draw(S.layouts_for(plan.model))
    stats = WorkloadStats.from_workload(S.scenario(scenario_id).workload)
    batch = np.unique(np.round(np.geomspace(1, 16384, 80)))
    q = 1.0 + plan.serving.draft_depth
    step_tokens = batch * q * (1 + stats.isl_mean / stats.osl_mean)
    bmax = parallel.max_batch(plan, layout, stats.context_mean, step_tokens)
    feasible = batch[batch <= bmax]
    assume(len(feasible) >= 2)
    tps = serving.offline(plan, layout, feasible, stats).tokens_per_s
    assert np.all(np.diff(tps) >= -1e-9 * tps[:-1]), (feasible, tps)


@given(plan=S.plans(model_id=S.dense_model_ids), b1=S.batches, b2=S.batches, ctx=S.contexts, data=st.data())
@S.examples(40)
def test_more_sequences_never_shorten_the_decode_step_dense(plan, b1, b2, ctx, data):
    # More work never takes less time. (Dense models only: for MoE models a batch-1 step currently
    # costs more than a batch-2..8 step, see the MoE small-GEMM efficiency note in the report.)
    layout = data.draw(S.layouts_for(plan.model))
    lo, hi = sorted((b1, b2))
    t_lo = float(step_cost(plan, layout, Shape(decode_seqs=lo, decode_ctx=ctx)).total)
    t_hi = float(step_cost(plan, layout, Shape(decode_seqs=hi, decode_ctx=ctx)).total)
    assert t_lo <= t_hi * (1 + 1e-12)


@given(plan=S.plans(), batch=S.batches, c1=S.contexts, c2=S.contexts, data=st.data())
@S.examples(40)
def test_longer_context_never_shortens_the_decode_step(plan, batch, c1, c2, data):
    layout = data.draw(S.layouts_for(plan.model))
    lo, hi = sorted((c1, c2))
    t_lo = float(step_cost(plan, layout, Shape(decode_seqs=batch, decode_ctx=lo)).total)
    t_hi = float(step_cost(plan, layout, Shape(decode_seqs=batch, decode_ctx=hi)).total)
    assert t_lo <= t_hi * (1 + 1e-12)


@given(plan=S.plans(), batch=S.batches, ctx=S.contexts, data=st.data())
@S.examples(40)
def test_decode_step_not_faster_than_streaming_weights(plan, batch, ctx, data):
    # Every decode step reads each device's non-expert linear weights and LM head shard at least
    # once (routed experts only where touched; the embedding table is looked up, not streamed).
    # A step covers pp micro-batches, each streaming its stage's 1/pp: (linear + head) / attn_tp.
    m = plan.model
    layout = data.draw(S.layouts_for(m))
    streamed = (m.linear_params_non_expert * plan.formats.wb + m.lm_head_params * 2.0) / layout.attn_tp
    t = float(step_cost(plan, layout, Shape(decode_seqs=batch, decode_ctx=ctx)).total)
    assert t >= streamed / plan.hardware.memory.bandwidth
    if not m.is_moe:
        # dense: every weight byte on the device (minus the looked-up embedding) is read per micro-batch
        per_device = parallel.weight_bytes_per_device(m, layout, plan.formats)
        per_device_streamed = per_device - m.embedding_params * 2.0 / layout.attn_tp
        assert t >= per_device_streamed / plan.hardware.memory.bandwidth


# ---- vectorized == scalar ---------------------------------------------------------------------------------


def _fields(cost):
    return {"total": cost.total, "compute_bound": cost.compute_bound, "memory_bound": cost.memory_bound,
            "comm_exposed": cost.comm_exposed, **{f"by_kind.{k}": v for k, v in cost.by_kind.items()}}


@pytest.mark.parametrize("model_id", ["llama3.1-8b", "deepseek-r1", "gpt-oss-120b"])
@given(data=st.data())
@S.examples(30)
def test_step_cost_array_path_equals_scalar_path(model_id, data):
    plan = data.draw(S.plans(model_id=st.just(model_id)))
    grid = data.draw(S.small_grids(plan.model))
    tp, pp, ep, dp = (grid[k][:, None, None] for k in ("tp", "pp", "ep", "dp"))  # [L, 1, 1]
    batch = grid["batch"][None, :, None]  # [1, B, 1]
    ctx = grid["context"][None, None, :]  # [1, 1, C]

    def shape_at(b, c):  # a mixed step: decodes plus the prefills that replace finished requests
        return Shape(decode_seqs=b, decode_q=1.0 + plan.serving.draft_depth, decode_ctx=c, prefill_seqs=b / 128,
                     prefill_len=c, prefill_len_sq=c * c)

    arr = _fields(step_cost(plan, Layout(tp=tp, pp=pp, ep=ep, dp=dp), shape_at(batch, ctx)))
    full = np.broadcast_shapes(tp.shape, batch.shape, ctx.shape)
    for i, j, k in np.ndindex(*full):
        layout = Layout(tp=int(grid["tp"][i]), pp=int(grid["pp"][i]), ep=int(grid["ep"][i]), dp=int(grid["dp"][i]))
        one = _fields(step_cost(plan, layout, shape_at(float(grid["batch"][j]), float(grid["context"][k]))))
        for name, value in arr.items():
            np.testing.assert_allclose(np.broadcast_to(value, full)[i, j, k], one[name], rtol=1e-9, err_msg=name)


# ---- the softmax exponential roof (special-function unit) --------------------------------------------------
B200 = S.pinned(S.hardware("b200"))  # 16 MUFU.EX2 per clock per SM: exp rate = dense BF16 / 512 (4.39e12/s)
B200_NO_EXP = B200.model_copy(update={"compute": S.respec(B200.compute, exp_rate_tera_per_s=None, exp_rate_source=None)})


def _attention(plan, shape, name):
    cost = step_cost(plan, Layout(), shape, detail=True)
    return float(cost.by_op[name]), cost.op_info[name][1]


def test_head_dim_64_prefill_attention_on_b200_is_exp_bound_at_the_unit_ratio():
    # gpt-oss-120b, head_dim 64: 4·64 = 256 FLOPs per exp against dense BF16 / exp rate = 2250 / 4.39 ≈ 512.5;
    # the tensor work runs at attention_fraction of peak, the exps at exp_fraction of the unit's rate,
    # so the exps take (512.5 / 256) · attention_fraction / exp_fraction times the tensor time
    eff = B200.efficiency
    plan = Plan(hardware=B200, model=S.model("gpt-oss-120b"), formats=BF16)
    shape = Shape(prefill_seqs=1, prefill_len=8192, prefill_len_sq=8192 ** 2)
    t, bound = _attention(plan, shape, "attention_prefill")
    t_tensor, tensor_bound = _attention(replace(plan, hardware=B200_NO_EXP), shape, "attention_prefill")
    ratio = 2250 / 4.39 / 256 * eff.attention_fraction / eff.exp_fraction
    assert ratio > 1 and tensor_bound == "compute" and bound == "softmax"
    assert t / t_tensor == pytest.approx(ratio, rel=1e-9)
    # sliding-window layers (128 tokens) take one exp per windowed score as well
    ops = {op.name: op for op in stage_graph(plan, Layout(), shape).ops}
    for name in ("attention_prefill", "attention_prefill_sliding"):
        assert float(ops[name].exps) > 0 and float(ops[name].flops) == pytest.approx(256 * float(ops[name].exps), rel=1e-12)


def test_head_72_vision_attention_in_fp8_waits_on_the_exponential_unit_on_b200():
    # Qwen3-VL encoder: 4·72 = 288 FLOPs per exp; in fp8 the tensor work would run at twice the BF16 rate,
    # but the exps (at exp_fraction of 4.39e12/s) take longer, so fp8 gains less than 2x over bf16
    model = S.model("qwen3-vl-235b-a22b")
    shape = Shape(prefill_seqs=4, prefill_len=1000, prefill_len_sq=1000 ** 2, prefill_patches=3600)
    times = {}
    for hw in (B200, B200_NO_EXP):
        for fmt in ("bf16", "fp8"):
            plan = Plan(hardware=hw, model=model, formats=Formats("bf16", "bf16", "bf16", vision_attention=fmt))
            times[hw is B200, fmt] = _attention(plan, shape, "vision_attention")
    eff = B200.efficiency
    assert times[True, "fp8"][1] == "softmax"
    # without the roof fp8 halves the tensor time of heads padded from 72 to 80 (cuDNN fp8 multiple of 16)
    assert times[False, "fp8"][0] == pytest.approx(0.5 * 80 / 72 * times[False, "bf16"][0], rel=1e-9)
    # with it, fp8 takes the exps' time: tensor-bf16 time x (2250 / 4.39 / 288) x attention_fraction / exp_fraction
    tb = times[False, "bf16"][0]
    t_exp = tb * 2250 / 4.39 / 288 * eff.attention_fraction / eff.exp_fraction
    assert t_exp > 0.5 * tb
    assert times[True, "fp8"][0] == pytest.approx(t_exp, rel=1e-9)
    assert times[True, "bf16"][0] == pytest.approx(max(tb, t_exp), rel=1e-9)


def test_decode_attention_stays_memory_bound_under_the_exp_roof():
    # decode reads the whole KV cache per score: 4·128 FLOPs and 2·8·128·2 / 32 = 128 B per score (GQA 32/8)
    plan = Plan(hardware=B200, model=LLAMA8B, formats=BF16)
    shape = Shape(decode_seqs=64, decode_ctx=4096)
    t, bound = _attention(plan, shape, "attention_decode")
    assert bound == "memory"
    assert t == _attention(replace(plan, hardware=B200_NO_EXP), shape, "attention_decode")[0]


def test_mla_attention_takes_one_exp_per_score_per_head():
    # DeepSeek-R1: prefill 2·(qk 192 + v 128) = 640 FLOPs per exp; absorbed decode 2·(2·512 + 64) = 2176
    plan = Plan(hardware=B200, model=S.model("deepseek-r1"), formats=BF16)
    shape = Shape(decode_seqs=8, decode_ctx=2048, prefill_seqs=1, prefill_len=4096, prefill_len_sq=4096 ** 2)
    ops = {op.name: op for op in stage_graph(plan, Layout(tp=8, ep=8), shape).ops}
    assert float(ops["attention_prefill"].flops) == pytest.approx(640 * float(ops["attention_prefill"].exps), rel=1e-12)
    assert float(ops["attention_decode"].flops) == pytest.approx(2176 * float(ops["attention_decode"].exps), rel=1e-12)
    # 8 decode sequences × 2048 context × 128 heads / 8 ranks
    assert float(ops["attention_decode"].exps) == pytest.approx(8 * 2048 * 16)


def _with_efficiency(hw, **fields):
    return hw.model_copy(update={"efficiency": hw.efficiency.model_copy(update=fields)})


def test_only_the_mla_decode_op_names_mla_decode_fraction():
    shape = Shape(decode_seqs=8, decode_ctx=2048, prefill_seqs=1, prefill_len=4096, prefill_len_sq=4096 ** 2)
    for model_id, layout in (("deepseek-r1", Layout(tp=8, ep=8)), ("llama3.1-8b", Layout()), ("gpt-oss-120b", Layout())):
        plan = Plan(hardware=B200, model=S.model(model_id), formats=BF16)
        named = [op.name for op in stage_graph(plan, layout, shape).ops if op.compute_efficiency]
        assert named == (["attention_decode"] if model_id == "deepseek-r1" else []), model_id
    ops = {op.name: op for op in stage_graph(Plan(hardware=B200, model=S.model("deepseek-r1"), formats=BF16),
                                             Layout(tp=8, ep=8), shape).ops}
    assert ops["attention_decode"].compute_efficiency == "mla_decode_fraction"


def test_mla_decode_attention_runs_at_mla_decode_fraction_and_prefill_at_attention_fraction():
    # absorbed MLA decode with an fp8 latent: 2176 FLOPs per score x 128 heads against 576 B per token,
    # 484 FLOP/B above B200's ridge 0.6 x 2250 / (0.5 x 8) = 338, so the core is compute-bound and
    # its time is 1/mla_decode_fraction
    hw = B200_NO_EXP
    plan = Plan(hardware=hw, model=S.model("deepseek-r1"), formats=Formats("bf16", "bf16", "fp8"))
    shape = Shape(decode_seqs=64, decode_ctx=4096, prefill_seqs=1, prefill_len=4096, prefill_len_sq=4096 ** 2)
    layout = Layout(tp=8, ep=8, dp=8)

    def times(**fields):
        cost = step_cost(replace(plan, hardware=_with_efficiency(hw, **fields)), layout, shape, detail=True)
        assert cost.op_info["attention_decode"][1] == "compute"
        return float(cost.by_op["attention_decode"]), float(cost.by_op["attention_prefill"])

    dec, pre = times(mla_decode_fraction=0.6, attention_fraction=0.3)
    dec2, pre2 = times(mla_decode_fraction=0.3, attention_fraction=0.3)
    dec3, pre3 = times(mla_decode_fraction=0.6, attention_fraction=0.15)
    assert dec2 == pytest.approx(2 * dec, rel=1e-12) and pre2 == pre
    assert dec3 == dec and pre3 == pytest.approx(2 * pre, rel=1e-12)
    # kernel maturity scales it like every other compute op
    slow = step_cost(replace(plan, hardware=_with_efficiency(hw, mla_decode_fraction=0.6), kernel_efficiency=0.5),
                     layout, shape, detail=True)
    assert float(slow.by_op["attention_decode"]) == pytest.approx(2 * dec, rel=1e-12)


@pytest.mark.parametrize("model_id", ["llama3.1-8b", "gpt-oss-120b"])
def test_gqa_model_is_unchanged_bit_for_bit_by_mla_decode_fraction(model_id):
    plan = Plan(hardware=B200, model=S.model(model_id), formats=BF16)
    shape = Shape(decode_seqs=np.array([1.0, 64.0]), decode_ctx=np.array([1024.0, 8192.0]), prefill_seqs=1,
                  prefill_len=2048, prefill_len_sq=2048 ** 2)
    a = step_cost(plan, Layout(), shape)
    for v in (0.3, 0.9):
        b = step_cost(replace(plan, hardware=_with_efficiency(B200, mla_decode_fraction=v)), Layout(), shape)
        for k, x in _fields(a).items():
            assert np.array_equal(x, _fields(b)[k]), k


def test_unset_mla_decode_fraction_falls_back_to_attention_fraction_bit_for_bit():
    plan = Plan(hardware=B200, model=S.model("deepseek-r1"), formats=BF16)
    shape = Shape(decode_seqs=np.array([8.0, 256.0]), decode_ctx=np.array([2048.0, 8192.0]), prefill_seqs=1,
                  prefill_len=4096, prefill_len_sq=4096 ** 2)
    assert B200.efficiency.mla_decode_fraction is None
    unset = step_cost(plan, Layout(tp=8, ep=8, dp=8), shape)
    same = step_cost(replace(plan, hardware=_with_efficiency(B200, mla_decode_fraction=B200.efficiency.attention_fraction)),
                     Layout(tp=8, ep=8, dp=8), shape)
    # attention DP: 128 heads per rank on one bf16 latent; at 0.15 of peak the core is compute-bound
    other = step_cost(replace(plan, hardware=_with_efficiency(B200, mla_decode_fraction=0.15)), Layout(tp=8, ep=8, dp=8), shape)
    for k, x in _fields(unset).items():
        assert np.array_equal(x, _fields(same)[k]), k
    assert np.all(other.total > unset.total)


def test_expert_tp_pays_the_k_depth_term_on_its_sliced_down_projection():
    # DeepSeek-R1 FP4 experts on 8 B200 at 16,000 decode tokens (500 rows per expert), at a small-GEMM
    # knee of 906 rows (the order of the fitted Blackwell knees): expert TP8 slices each expert's
    # 2048-wide intermediate to K 256 (one 128-byte FP4 k-block) where EP8 keeps K 2048 (eight). A
    # per-tile overhead of 4.1 k-blocks makes the MMA time 5.1x under TP8 and 12.1/8 = 1.51x under
    # EP8 (compute-bound, so exactly that); TP8's down-projection, memory-bound without the term (it
    # writes 16-bit partial outputs of every token's eight assignments), turns compute-bound and
    # more than doubles. The gate/up projection (K 7168) pays 32.1/28 in both layouts.
    plan = Plan(hardware=B200, model=S.model("deepseek-r1"), formats=Formats("fp4", "fp4", "fp8"))
    shape = Shape(decode_seqs=16000, decode_ctx=2048)
    ratios = {}
    for ep in (8, 1):
        layout = Layout(tp=8, ep=ep, dp=8)
        off = step_cost(replace(plan, hardware=_with_efficiency(B200, gemm_m_half=906.0)), layout, shape, detail=True)
        on = step_cost(replace(plan, hardware=_with_efficiency(B200, gemm_m_half=906.0, gemm_k_overhead_blocks=4.1)),
                       layout, shape, detail=True)
        assert off.op_info["experts_gate_up"][1] == "compute" and on.op_info["experts_down"][1] == "compute"
        for name in ("experts_down", "experts_gate_up"):
            ratios[ep, name] = float(on.by_op[name]) / float(off.by_op[name])
        bound_off = off.op_info["experts_down"][1]
    assert bound_off == "memory"  # expert TP8 without the term
    assert ratios[8, "experts_down"] == pytest.approx(12.1 / 8, rel=1e-9)
    assert 2.0 < ratios[1, "experts_down"] < 5.1
    assert ratios[1, "experts_gate_up"] == pytest.approx(32.1 / 28, rel=1e-9)
    assert ratios[8, "experts_gate_up"] == pytest.approx(32.1 / 28, rel=1e-9)


def test_routed_experts_stream_at_moe_memory_fraction_and_nothing_else_does():
    """Only the grouped routed-expert GEMMs read their bytes at ``moe_memory_fraction``: at batch 1
    they are memory-bound, so halving it doubles exactly their time, and every other op (dense and
    shared-expert GEMMs, attention, elementwise) keeps its time bit for bit."""
    plan = Plan(hardware=B200_NO_EXP, model=S.model("deepseek-r1"), formats=Formats("fp8", "fp8", "fp8"))
    ops = stage_graph(plan, Layout(tp=8, ep=8), Shape(decode_seqs=1, decode_ctx=1024)).ops
    assert {op.name for op in ops if op.memory_efficiency == "moe_memory_fraction"} == {"experts_gate_up", "experts_down"}
    assert all(op.grouped == (op.memory_efficiency == "moe_memory_fraction") for op in ops)
    shape = Shape(decode_seqs=1, decode_ctx=1024)

    def cost(v):
        c = step_cost(replace(plan, hardware=_with_efficiency(B200_NO_EXP, moe_memory_fraction=v)), Layout(tp=8, ep=8),
                      shape, detail=True)
        return {k: float(t) for k, t in c.by_op.items()}, c.op_info

    fast, info = cost(0.8)
    slow, _ = cost(0.4)
    for name in ("experts_gate_up", "experts_down"):
        assert info[name][1] == "memory" and slow[name] == pytest.approx(2 * fast[name], rel=1e-12)
    assert {k: v for k, v in slow.items() if not k.startswith("experts_")} == \
        {k: v for k, v in fast.items() if not k.startswith("experts_")}


def test_dense_fp4_gemms_stream_at_fp4_memory_fraction_where_the_gpu_runs_fp4():
    """On a GPU with FP4 tensor cores the dense block-scaled FP4 GEMMs read their weights at
    ``fp4_memory_fraction``: at batch 1 they are memory-bound, so halving it doubles exactly their
    time and leaves every other op bit for bit. An 8-bit GEMM, and FP4 weights on a GPU without FP4
    tensor cores (H100: they compute in fp8), keep ``memory_fraction``."""
    shape = Shape(decode_seqs=1, decode_ctx=1024)
    fp4 = Formats("fp4", "fp4", "fp8")
    plan = Plan(hardware=_with_efficiency(B200_NO_EXP, gemm_overlap=1.0), model=LLAMA8B, formats=fp4)
    gemms = {op.name for op in stage_graph(plan, Layout(), shape).ops if op.memory_efficiency == "fp4_memory_fraction"}
    assert gemms == {"qkv_proj", "o_proj", "mlp_gate_up", "mlp_down", "lm_head"}

    def cost(hw, formats, v):
        c = step_cost(replace(plan, hardware=_with_efficiency(hw, fp4_memory_fraction=v), formats=formats), Layout(),
                      shape, detail=True)
        return {k: float(t) for k, t in c.by_op.items()}, c.op_info

    fast, info = cost(plan.hardware, fp4, 0.8)
    slow, _ = cost(plan.hardware, fp4, 0.4)
    for name in gemms:
        assert info[name][1] == "memory" and slow[name] == pytest.approx(2 * fast[name], rel=1e-12)
    assert {k: v for k, v in slow.items() if k not in gemms} == {k: v for k, v in fast.items() if k not in gemms}
    fp8 = Formats("fp8", "fp8", "fp8")
    assert cost(plan.hardware, fp8, 0.4)[0] == cost(plan.hardware, fp8, 0.8)[0]
    assert cost(H100, fp4, 0.4)[0] == cost(H100, fp4, 0.8)[0]


def test_moe_maturity_scales_the_experts_weight_stream_up_to_the_dense_rate():
    """The round's MoE maturity speeds the routed experts' weight stream as well as their MMAs: at batch 1
    (memory-bound) maturity m divides their time by m while moe_memory_fraction·m stays below the dense
    memory_fraction, and by at most memory_fraction / moe_memory_fraction beyond it; every other op keeps
    its time bit for bit, and maturity 1 is the plain moe_memory_fraction."""
    hw = _with_efficiency(B200_NO_EXP, moe_memory_fraction=0.2, memory_fraction=0.8)
    plan = Plan(hardware=hw, model=S.model("deepseek-r1"), formats=Formats("fp8", "fp8", "fp8"))
    shape = Shape(decode_seqs=1, decode_ctx=1024)

    def cost(m):
        c = step_cost(replace(plan, moe_kernel_efficiency=m), Layout(tp=8, ep=8), shape, detail=True)
        return {k: float(t) for k, t in c.by_op.items()}, c.op_info

    base, info = cost(1.0)
    x15, _ = cost(1.5)
    x9, _ = cost(9.0)  # 0.2 x 9 = 1.8: capped at the dense 0.8, a 4x faster stream
    for name in ("experts_gate_up", "experts_down"):
        assert info[name][1] == "memory"
        assert x15[name] == pytest.approx(base[name] / 1.5, rel=1e-12)
        assert x9[name] == pytest.approx(base[name] / 4.0, rel=1e-12)
    others = {k: v for k, v in base.items() if not k.startswith("experts_")}
    assert others == {k: v for k, v in x15.items() if not k.startswith("experts_")}
    assert others == {k: v for k, v in x9.items() if not k.startswith("experts_")}


def test_dense_kernel_maturity_leaves_the_routed_experts_alone():
    """The routed experts run their MoE backend's own kernels: the round's dense ``kernel_efficiency``
    leaves their time unchanged bit for bit (compute-bound at a large batch), ``moe_kernel_efficiency``
    alone divides their MMA time, and the dense GEMMs follow ``kernel_efficiency``."""
    hw = _with_efficiency(B200_NO_EXP, moe_memory_fraction=0.8, memory_fraction=0.8)
    plan = Plan(hardware=hw, model=S.model("deepseek-r1"), formats=Formats("fp8", "fp8", "fp8"))
    shape = Shape(decode_seqs=16384, decode_ctx=1024)

    def cost(k, m):
        c = step_cost(replace(plan, kernel_efficiency=k, moe_kernel_efficiency=m), Layout(tp=8, ep=8), shape,
                      detail=True)
        return {n: float(t) for n, t in c.by_op.items()}, c.op_info

    base, info = cost(1.0, 1.0)
    slow_dense, _ = cost(0.5, 1.0)
    fast_moe, _ = cost(1.0, 1.25)
    experts = ("experts_gate_up", "experts_down")
    for name in experts:
        assert info[name][1] == "compute"
        assert slow_dense[name] == base[name]
        assert fast_moe[name] == pytest.approx(base[name] / 1.25, rel=1e-9)
    for name in ("q_a_proj", "o_proj", "lm_head"):  # compute-bound dense GEMMs: twice as long at half the maturity
        assert info[name][1] == "compute" and slow_dense[name] == pytest.approx(2 * base[name], rel=1e-9)
