"""Operator graph: op records, FLOP and byte formulas, KV sizes, expert routing (infersim.graph).

Hand-computed cases carry their arithmetic in a comment; properties follow.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from infersim.graph import Formats, Layout, OpKind, Shape, build_graph, expected_experts_touched, gemm

import strategies as S

BF16 = Formats("bf16", "bf16", "bf16")
FP8 = Formats("fp8", "fp8", "fp8")
LLAMA8B = S.model("llama3.1-8b")
R1 = S.model("deepseek-r1")
MIXTRAL = S.model("mixtral-8x7b")
GPT_OSS = S.model("gpt-oss-120b")


def gemm_flops(graph) -> float:
    """Σ count · FLOPs over the GEMM ops of a graph (attention cores excluded)."""
    return float(sum(np.sum(op.count * op.flops) for op in graph.ops if op.kind == OpKind.GEMM))


def ops_named(graph, *names):
    return [op for op in graph.ops if op.name in names]


# ---- the GEMM shape helper ----------------------------------------------------------------------------


def test_gemm_flops_and_bytes_by_hand():
    # [m=3, k=7] x [k=7, n=5], bf16: FLOPs = 2·3·5·7 = 210
    # bytes = weights 7·5·2 + inputs 3·7·2 + outputs 3·5·2 = 70 + 42 + 30 = 142
    op = gemm("g", 3, 5, 7, 2, BF16, "mlp")
    assert op.flops == 210 and op.bytes == 142 and op.count == 2 and op.kind == OpKind.GEMM
    # fp8 weights and inputs, 16-bit outputs: 35 + 21 + 30 = 86
    assert gemm("g", 3, 5, 7, 1, FP8, "mlp").bytes == 86
    # an empty GEMM (m = 0) is not launched: no weight traffic either
    assert gemm("g", 0, 5, 7, 1, BF16, "mlp").bytes == 0


def test_gemm_broadcasts_rows():
    m = np.array([1.0, 16.0, 4096.0])
    op = gemm("g", m, 4096, 4096, 1, BF16, "mlp")
    np.testing.assert_allclose(op.flops, 2 * m * 4096 * 4096)
    np.testing.assert_allclose(op.bytes, 4096 * 4096 * 2 + m * 4096 * 2 + m * 4096 * 2)


def test_formats_gemm_runs_at_the_wider_format():
    assert Formats("fp4", "fp8", "fp8").gemm == "fp8"
    assert Formats("fp8", "bf16", "fp8").gemm == "bf16"
    assert Formats("bf16", "bf16", "fp8").attention == "fp8"  # FP8 FMHA with an fp8 KV cache


# ---- FLOPs per token = 2 × (active params − embedding) ----------------------------------------------------


def test_dense_gemm_flops_per_token_llama_8b():
    # Llama 3.1 8B (h 4096, 32 heads / 8 KV heads of 128, I 14336, 32 layers, vocab 128256):
    #   attention/layer: 4096·(4096 + 2·1024) + 4096·4096 = 25,165,824 + 16,777,216 = 41,943,040
    #   MLP/layer:       3·4096·14336                                           = 176,160,768
    #   32 layers: 32 · 218,103,808 = 6,979,321,856;  LM head 128256·4096 = 525,336,576
    #   active − embedding = 7,504,658,432 params → 15,009,316,864 FLOP/token
    graph = build_graph(LLAMA8B, Shape(decode_seqs=1, decode_ctx=1), Layout(), BF16)
    assert gemm_flops(graph) == pytest.approx(15_009_316_864, rel=1e-12)
    assert LLAMA8B.active_params - LLAMA8B.embedding_params == 7_504_658_432
    assert gemm_flops(graph) == pytest.approx(2 * (LLAMA8B.active_params - LLAMA8B.embedding_params), rel=0.02)


@pytest.mark.parametrize("tokens", [1.0, 4096.0])
def test_moe_mla_gemm_flops_per_token_deepseek_r1(tokens):
    # DeepSeek-R1 (h 7168, 61 layers of which 3 dense, 256 experts top-8 + 1 shared of I 2048):
    #   MLA/layer: q_a 7168·1536 + q_b 1536·128·192 + kv_a 7168·576 + kv_b 512·128·256 + o 128·128·7168
    #            = 11,010,048 + 37,748,736 + 4,128,768 + 16,777,216 + 117,440,512 = 187,105,280
    #     (decode runs kv_b as the absorbed q/v GEMMs: 2·128·512·(128 + 128) FLOPs = 2 × kv_b params)
    #   dense MLP: 3·7168·18432 = 396,361,728; one expert: 3·7168·2048 = 44,040,192;
    #   MoE layer: (8 routed + 1 shared) · 44,040,192 + router 7168·256 = 396,361,728 + 1,835,008
    #   58 MoE layers · 585,302,016 + 3 dense layers · 583,467,008 + LM head 129280·7168 (926,679,040)
    #     = 33,947,516,928 + 1,750,401,024 + 926,679,040 = 36,624,596,992 → 73,249,193,984 FLOP/token.
    # Per-token FLOPs use top_k whatever the number of experts the step touches.
    graph = build_graph(R1, Shape(decode_seqs=tokens, decode_ctx=1), Layout(), BF16)
    assert gemm_flops(graph) / tokens == pytest.approx(73_249_193_984, rel=1e-12)
    assert gemm_flops(graph) / tokens == pytest.approx(2 * (R1.active_params - R1.embedding_params), rel=0.02)


@pytest.mark.parametrize("model_id", ["mixtral-8x7b", "gpt-oss-120b", "qwen3-235b-a22b", "llama3.1-70b"])
def test_gemm_flops_per_token_matches_active_params(model_id):
    # gpt-oss counts QKV/O biases as parameters (no GEMM FLOPs): 0.006 % apart
    m = S.model(model_id)
    graph = build_graph(m, Shape(decode_seqs=512, decode_ctx=1), Layout(), BF16)
    assert gemm_flops(graph) / 512 == pytest.approx(2 * (m.active_params - m.embedding_params), rel=0.02)


def test_moe_weight_traffic_experts_touched_from_k_to_all():
    # DeepSeek-R1, bf16, one MoE layer: one expert's weights 3·7168·2048·2 B = 88,080,384 B.
    # 1 token touches top_k = 8 experts → 704,643,072 B; 4096 tokens touch
    # 256·(1 − (1 − 8/256)^4096) ≈ 256 experts → 22,548,578,304 B.
    # Activation traffic subtracted by hand: each assignment reads h·2 B and writes 2·I·2 B in
    # gate_up, reads I·2 B and writes h·2 B in down: 2·7168 + 4·2048 + 2·2048 + 2·7168 = 40,960 B.
    for tokens, experts in ((1.0, 8), (4096.0, 256)):
        graph = build_graph(R1, Shape(decode_seqs=tokens, decode_ctx=1), Layout(), BF16)
        up, down = ops_named(graph, "experts_gate_up", "experts_down")
        assignments = tokens * 8
        weights = float(up.bytes + down.bytes) - assignments * 40_960
        assert weights == pytest.approx(experts * 88_080_384, rel=1e-9)


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_tensor_parallel_splits_gemm_flops_exactly(tp):
    # tp divides the 8 KV heads: tp devices do exactly the tp = 1 work between them
    shape = Shape(decode_seqs=64, decode_ctx=1000)
    one = gemm_flops(build_graph(LLAMA8B, shape, Layout(), BF16))
    split = gemm_flops(build_graph(LLAMA8B, shape, Layout(tp=tp), BF16))
    assert tp * split == pytest.approx(one, rel=1e-12)


def test_kv_heads_replicate_beyond_n_kv_heads():
    # tp = 16 > 8 KV heads: every rank computes one KV head, so 16 instead of 8 K and V heads are
    # projected. Extra FLOPs per token: 2 · 4096 · (8 heads · 2 · 128) · 32 layers = 536,870,912
    shape = Shape(decode_seqs=1, decode_ctx=1)
    one = gemm_flops(build_graph(LLAMA8B, shape, Layout(), BF16))
    split = gemm_flops(build_graph(LLAMA8B, shape, Layout(tp=16), BF16))
    assert 16 * split - one == pytest.approx(536_870_912, rel=1e-12)


@pytest.mark.parametrize("pp", [2, 4, 8])
def test_pipeline_stages_split_the_whole_step(pp):
    # a stage runs layers/pp on the full micro-batch; pp stages together equal one unsplit pass
    shape = Shape(decode_seqs=32, decode_ctx=500, prefill_seqs=0.5, prefill_len=900, prefill_len_sq=900**2)
    whole = build_graph(R1, shape, Layout(), FP8)
    stage = build_graph(R1, shape, Layout(pp=pp), FP8)
    for kind in (OpKind.GEMM, OpKind.ATTENTION, OpKind.ELEMENTWISE):
        f_whole = sum(np.sum(op.count * op.flops) for op in whole.ops if op.kind == kind)
        f_stage = sum(np.sum(op.count * op.flops) for op in stage.ops if op.kind == kind)
        b_whole = sum(np.sum(op.count * op.bytes) for op in whole.ops if op.kind == kind)
        b_stage = sum(np.sum(op.count * op.bytes) for op in stage.ops if op.kind == kind)
        assert pp * f_stage == pytest.approx(f_whole, rel=1e-12)
        assert pp * b_stage == pytest.approx(b_whole, rel=1e-12)


# ---- KV cache --------------------------------------------------------------------------------------------


def test_mla_kv_bytes_per_token_deepseek_r1():
    # 61 layers · (kv_lora 512 + rope 64) · 2 B = 70,272 B per token (bf16); fp8: 35,136
    assert R1.kv_bytes_per_token("bf16") == 70_272
    assert R1.kv_bytes_per_token("fp8") == 35_136


def test_gqa_kv_bytes_per_token_llama_8b():
    # 32 layers · 2 (K, V) · 8 KV heads · 128 · 2 B = 131,072 B per token
    assert LLAMA8B.kv_bytes_per_token("bf16") == 131_072


def test_sliding_window_kv_is_capped_gpt_oss():
    # 18 full layers · 2 · 8 · 64 · 2 B = 36,864 B/token; 18 sliding layers the same, for ≤ 128 tokens:
    #   1000 tokens: 1000·36,864 + 128·36,864 = 41,582,592 B;  100 tokens: 200 · 36,864 = 7,372,800 B
    assert GPT_OSS.kv_bytes_per_token("bf16") == 36_864
    assert GPT_OSS.kv_cache_bytes(1000, "bf16") == 41_582_592
    assert GPT_OSS.kv_cache_bytes(100, "bf16") == 7_372_800


def test_mla_decode_reads_the_latent_per_context_token():
    # one sequence at context 1000, bf16 KV: every layer reads 1000 · 576 · 2 = 1,152,000 B of latent
    # (+ writes 1 token: 1152 B; + query/output I/O 2 · 1 · 128 heads · 576 · 2 B = 294,912 B)
    graph = build_graph(R1, Shape(decode_seqs=1, decode_ctx=1000), Layout(), BF16)
    (att,) = ops_named(graph, "attention_decode")
    assert float(att.bytes) == pytest.approx(1_152_000 + 1_152 + 294_912, rel=1e-12)
    assert att.count == 61
    # absorbed decode core: 2 · 128 heads · 1000 pairs · (2·512 + 64) = 278,528,000 FLOPs per layer
    assert float(att.flops) == pytest.approx(278_528_000, rel=1e-12)


def test_sliding_layers_cap_attention_pairs_gpt_oss():
    # decode at context 4096: full layers see 4096 keys, sliding layers 128.
    # core FLOPs per layer = 4 · pairs · 64 heads · 64 = 16,384 · pairs
    graph = build_graph(GPT_OSS, Shape(decode_seqs=1, decode_ctx=4096), Layout(), BF16)
    (full,) = ops_named(graph, "attention_decode")
    (slide,) = ops_named(graph, "attention_decode_sliding")
    assert float(full.flops) == pytest.approx(16_384 * 4096)
    assert float(slide.flops) == pytest.approx(16_384 * 128)
    assert full.count == slide.count == 18


# ---- expected experts touched ------------------------------------------------------------------------------


def test_expected_experts_touched_limits():
    # E·(1 − (1 − k/E)^T): T = 1 → k exactly; T = 0 → 0; T → ∞ → E
    assert expected_experts_touched(256, 8, 1) == pytest.approx(8, rel=1e-12)
    assert expected_experts_touched(256, 8, 0) == 0
    assert expected_experts_touched(256, 8, 1e6) == pytest.approx(256, rel=1e-12)
    # T = 2, E = 8, k = 2: 8·(1 − 0.75²) = 3.5
    assert expected_experts_touched(8, 2, 2) == pytest.approx(3.5, rel=1e-12)
    # top_k = E: every token touches every expert
    assert expected_experts_touched(8, 8, 1) == pytest.approx(8)


@given(E=st.integers(1, 512), data=st.data(), t1=st.floats(0, 1e6), t2=st.floats(0, 1e6))
@S.examples(50)
def test_expected_experts_touched_is_monotone_and_bounded(E, data, t1, t2):
    k = data.draw(st.integers(1, E))
    lo, hi = sorted((t1, t2))
    e_lo, e_hi = expected_experts_touched(E, k, lo), expected_experts_touched(E, k, hi)
    assert e_lo <= e_hi * (1 + 1e-12) + 1e-12  # monotone in tokens
    assert e_hi <= E * (1 + 1e-12)  # never more than all experts
    if lo >= 1:  # (Bernoulli's inequality; it reverses for fractional T < 1)
        assert e_lo <= lo * k * (1 + 1e-9)  # never more than one expert per assignment
        assert e_lo >= k * (1 - 1e-9)  # at least one token's k experts


@given(model_id=S.model_ids, fmt=S.formats, batch=S.batches, ctx=S.contexts, data=st.data())
@S.examples(40)
def test_graph_quantities_are_finite_and_nonnegative(model_id, fmt, batch, ctx, data):
    m = S.model(model_id)
    layout = data.draw(S.layouts_for(m))
    graph = build_graph(m, Shape(decode_seqs=batch, decode_ctx=ctx, prefill_seqs=batch / 100, prefill_len=ctx,
                                 prefill_len_sq=ctx * ctx), layout, fmt)
    for op in graph.ops:
        for value in (op.count, op.flops, op.bytes):
            assert np.all(np.isfinite(value)) and np.all(np.asarray(value) >= 0), op.name


def test_fusable_elementwise_names_match_the_graph():
    """``presets.FUSABLE_ELEMENTWISE`` (the literal an engine block's ``fused_elementwise`` may name)
    lists exactly the fusable ops the graph builds over the bundled models: an op renamed or added
    in ``graph`` without updating the list would make a preset's name silently fuse nothing."""
    from infersim.graph import Formats, Layout, Shape, build_graph
    from infersim.optimizations.presets import FUSABLE_ELEMENTWISE
    from infersim.specs import catalog
    from infersim.specs.model import ModelSpec

    shape = Shape(decode_seqs=4.0, decode_ctx=512.0, prefill_seqs=1.0, prefill_len=256.0, prefill_len_sq=65536.0,
                  prefill_patches=64.0)
    built = set()
    for model_id in catalog.list_ids("model"):
        model = catalog.load_model(model_id)
        if not isinstance(model, ModelSpec):  # diffusion and recommender models have no LLM graph
            continue
        graph = build_graph(model, shape, Layout(tp=2, ep=2, dp=1), Formats("fp8", "fp8", "fp8"))
        built |= {op.name for op in graph.ops if op.fusable}
    assert built == set(FUSABLE_ELEMENTWISE)
