"""Per-system recipes in the round presets (layout, checkpoint formats, token budget, stack) and
their use by the prediction: the v6.0 Qwen3-VL runs (shared/reference/mlperf_engine_settings.csv
v6.0 qwen3-vl rows and the vLLM command lines cited in presets/v6.0.yaml)."""

from __future__ import annotations

import dataclasses

import json
from dataclasses import replace

import pytest

from infersim import api
from infersim.errors import SpecError
from infersim.graph import Formats, Layout, Shape, vision_ops
from infersim.optimizations.presets import PresetSpec, Stack, load_preset
from infersim.specs import load_model
from infersim.specs._base import validate_data

VL = "qwen3-vl-235b-a22b"

# (hardware, scenario kind) -> (tp, ep, weights, kv, vision attention, max_num_tokens), read off the
# CSV's tensor_parallel_size / moe_expert_parallel_size / max_num_tokens columns and the recipes'
# checkpoint, --kv-cache-dtype (Blackwell: none given and no KV scheme in the NVFP4 checkpoint, so
# vLLM keeps the model's bf16) and VLLM_MM_ENCODER_FP8_ATTN
RUNS = {
    ("b200", "offline"): (1, 1, "fp4", "bf16", "fp8", 4864),
    ("b200", "server"): (1, 1, "fp4", "bf16", "fp8", 4864),
    ("gb200-nvl72", "offline"): (1, 1, "fp4", "bf16", "fp8", 4864),
    ("gb200-nvl72", "server"): (1, 1, "fp4", "bf16", "fp8", 4864),
    ("gb300-nvl72", "offline"): (1, 1, "fp4", "bf16", "fp8", 13824),
    ("gb300-nvl72", "server"): (1, 1, "fp4", "bf16", "fp8", 8192),
    ("b300", "offline"): (1, 1, "fp4", "bf16", "bf16", 13824),
    ("b300", "server"): (1, 1, "fp4", "bf16", "bf16", 8192),
    ("h200-sxm", "offline"): (4, 4, "fp8", "fp8", "bf16", 16384),
    ("h200-sxm", "server"): (4, 4, "fp8", "fp8", "bf16", 16384),
}


@pytest.mark.parametrize("hw,kind", sorted(RUNS))
def test_v60_qwen3_vl_recipe_per_system(hw, kind):
    tp, ep, w, kv, va, tokens = RUNS[hw, kind]
    p = load_preset("v6.0")
    r = p.recipe_for(VL, kind, hw)
    assert (r.stack, r.tp, r.pp, r.ep, r.dp) == (Stack.VLLM, tp, 1, ep, 1)
    assert (r.weights, r.kv_cache, r.vision_attention) == (w, kv, va)
    e = p.engine_for(VL, kind, hw)
    assert (e.max_batch_size, e.max_num_tokens, e.chunked_prefill) == (1024, tokens, True)


def test_recipe_of_hardware_without_a_run_pins_nothing():
    r = load_preset("v6.0").recipe_for(VL, "offline", "h100-sxm")
    assert r.layout == {} and r.weights is None and r.stack == Stack.VLLM
    # LLM models keep the preset's stack and no recipe fields
    llm = load_preset("v6.0").recipe_for("llama2-70b", "offline", "b200")
    assert llm.stack == Stack.TENSORRT_LLM and llm.layout == {} and llm.weights is None


@pytest.mark.parametrize("hw,n,kind", [("b200", 8, "offline"), ("gb300-nvl72", 4, "server"), ("h200-sxm", 8, "offline")])
def test_prediction_uses_the_runs_layout_and_formats(hw, n, kind):
    tp, ep, w, kv, _, _ = RUNS[hw, kind]
    pred = api.predict(hw, VL, f"mlperf-qwen3-vl-235b-a22b-{kind}", n, round="v6.0")
    assert pred.feasible
    c = pred.config
    assert (c["tp"], c["ep"], c["dp"], c["pp"], c["replicas"]) == (tp, ep, 1, 1, n // tp)
    assert not c["disaggregated"]  # every published run is aggregated (one vLLM engine per instance)
    assert (c["weights"], c["activations"], c["kv_cache"]) == (w, w, kv)


def test_user_layout_and_odd_sizes_override_the_recipe():
    fixed = api.predict("b200", VL, "mlperf-qwen3-vl-235b-a22b-offline", 8, round="v6.0", tp=2)
    assert fixed.feasible and fixed.config["tp"] == 2
    # two H200s cannot hold the recipe's TP4 instance: the layout is searched instead
    base = api.base_plan(*_query("h200-sxm", 2))
    assert base.search.tp is None and base.search.ep is None
    assert api.base_plan(*_query("h200-sxm", 8)).search.tp == (4,)


def _query(hw, n):
    q = api.Query.build(hw, VL, "mlperf-qwen3-vl-235b-a22b-offline", n, round="v6.0")
    return q.inputs, q.software, q.layout, q.accelerators


def test_round_maturity_applies_only_to_its_own_stack():
    p = load_preset("v6.0")
    assert p.stack == Stack.TENSORRT_LLM
    vl = api.base_plan(*_query("b200", 8))
    assert (vl.kernel_efficiency, vl.moe_kernel_efficiency, vl.host_overhead_scale) == (1.0, 1.0, 1.0)
    q = api.Query.build("b200", "llama2-70b", "mlperf-llama2-70b-offline", 8, round="v6.0")
    llm = api.base_plan(q.inputs, q.software, q.layout, q.accelerators)
    assert (llm.kernel_efficiency, llm.moe_kernel_efficiency, llm.host_overhead_scale) == \
        (p.kernel_efficiency, p.moe_kernel_efficiency, p.host_overhead_scale)
    assert p.kernel_efficiency != 1.0  # else the check above could not tell the two apart


def test_vision_attention_runs_in_the_recipes_format():
    vl = load_model(VL)
    shape = Shape(prefill_seqs=2, prefill_patches=5000.0, prefill_patches_sq=7e7)
    ops = {f: {o.name: o for o in vision_ops(vl, shape, Layout(), Formats("fp4", "fp4", "fp8", f))} for f in ("bf16", "fp8")}
    assert ops["fp8"]["vision_attention"].precision == "fp8" and ops["bf16"]["vision_attention"].precision == "bf16"
    # fp8 runs on heads padded from 72 to 80 (the cuDNN fp8 kernel's multiple of 16): 80/72 the tensor
    # FLOPs and Q/K/V/O bytes, the same softmax exponentials
    fp8, bf16 = ops["fp8"]["vision_attention"], ops["bf16"]["vision_attention"]
    assert float(fp8.flops) == pytest.approx(80 / 72 * float(bf16.flops), rel=1e-12)
    assert float(fp8.bytes) == pytest.approx(80 / 72 * float(bf16.bytes), rel=1e-12)
    assert float(fp8.exps) == float(bf16.exps)
    assert Formats("fp4", "fp4", "fp8").vision_attention == "bf16"  # the default
    # the encoder's linear layers stay 16 bit (the NVFP4 checkpoint quantizes the language model)
    assert ops["fp8"]["vision_encoder"].precision == "bf16"
    # the step prices the fp8 attention at the fp8 rate: the GB300 Offline step is faster with it, up to the
    # exponential roof: head 72 takes 4·72 = 288 FLOPs per softmax exp, the exp unit one per dense BF16 / 256
    # FLOPs on Blackwell Ultra, the tensor work at attention_fraction of peak and the exps at exp_fraction
    q = api.Query.build("gb300-nvl72", VL, "mlperf-qwen3-vl-235b-a22b-offline", 4, round="v6.0")
    plan = api.base_plan(q.inputs, q.software, q.layout, q.accelerators)
    from dataclasses import replace

    from infersim.engine import step_cost

    s = Shape(decode_seqs=100, decode_ctx=2000, prefill_seqs=4, prefill_len=2144, prefill_len_sq=7.6e6,
              prefill_patches=5156, prefill_patches_sq=7.4e7)
    t8 = step_cost(plan, Layout(), s, detail=True).by_op["vision_attention"]
    t16 = step_cost(replace(plan, formats=replace(plan.formats, vision_attention="bf16")), Layout(), s, detail=True).by_op["vision_attention"]
    assert plan.formats.vision_attention == "fp8"
    eff = plan.hardware.efficiency
    hw = plan.hardware.compute
    op16 = {o.name: o for o in vision_ops(vl, s, Layout(), replace(plan.formats, vision_attention="bf16"))}["vision_attention"]
    a_eff = eff.attention_fraction * plan.kernel_efficiency
    tensor16 = op16.count * float(op16.flops) / (hw.flop_rate("bf16") * a_eff)
    t_exp = op16.count * float(op16.exps) / (hw.exp_rate * eff.exp_fraction)
    # 288 tensor FLOPs per exponential (head 72): the two roofs in the ratio the comment above derives
    assert t_exp / tensor16 == pytest.approx(hw.flop_rate("bf16") / hw.exp_rate / 288 * a_eff / eff.exp_fraction, rel=1e-9)
    assert float(t16) == pytest.approx(max(tensor16, t_exp), rel=1e-9)  # bf16: the longer roof (memory is short)
    # fp8: half the bf16 tensor time on heads padded 72 -> 80, or the exponentials' time if longer
    assert float(t8) == pytest.approx(max(0.5 * 80 / 72 * tensor16, t_exp), rel=1e-9)
    # faster in fp8 unless bf16 is already on the exponential roof (GB300 at the fitted attention
    # fraction 0.85 of the 2026-11-26 fit: both formats then take the exponentials' time)
    assert float(t8) < float(t16) or t_exp >= tensor16


def test_recipe_fields_are_validated():
    data = load_preset("v6.0").model_dump(mode="json", exclude_none=True)
    data["engine"]["models"][VL]["hardware"]["b200"]["weights"] = "fp3"
    with pytest.raises(SpecError, match="weights"):
        validate_data(PresetSpec, data, file="x.yaml")
    data["engine"]["models"][VL]["hardware"]["b200"]["weights"] = "fp4"
    data["engine"]["models"][VL]["stack"] = "tgi"
    with pytest.raises(SpecError, match="stack"):
        validate_data(PresetSpec, data, file="x.yaml")
    data["engine"]["models"][VL]["stack"] = "vllm"
    data["engine"]["models"][VL]["disable"] = ["overlap", "dbo"]
    with pytest.raises(SpecError, match="disable.*unknown optimization.*dbo"):
        validate_data(PresetSpec, data, file="x.yaml")


def test_vllm_keeps_its_norms_residual_adds_and_rope_as_memory_kernels():
    # vLLM fuses elementwise ops with each other (fused_add_rms_norm, fused_qk_norm_rope, the activation
    # inside FlashInfer's fused MoE), not into GEMM epilogues as TensorRT-LLM does
    from infersim.engine import step_cost
    from infersim.optimizations.fusion import Fusion

    shape = Shape(decode_seqs=100, decode_ctx=2000, prefill_seqs=2, prefill_len=2144, prefill_len_sq=5e6)
    vl = api.base_plan(*_query("b200", 8))
    assert vl.engine.fused_elementwise == ("qk_norm", "experts_act")
    q = api.Query.build("b200", "qwen3-235b-a22b", "mlperf-llama2-70b-offline", 8, round="v6.0")
    trt = api.base_plan(q.inputs, q.software, q.layout, q.accelerators)
    assert trt.engine.fused_elementwise is None
    for plan, kept in ((vl, {"rope", "input_norm", "post_attn_norm", "residual_add"}), (trt, set())):
        fused = Fusion().apply(plan)
        ops = {k for k, (kind, _) in step_cost(fused, Layout(), shape, detail=True).op_info.items()
               if kind == "elementwise"}
        assert {"rope", "input_norm", "post_attn_norm", "residual_add"} & ops == kept
        assert not ops & {"qk_norm", "experts_act"}
    # the kept passes cost the vLLM step memory time: a slower step than with every op folded
    everything = replace(vl, engine=replace(vl.engine, fused_elementwise=None))
    t_vllm = step_cost(Fusion().apply(vl), Layout(), shape).total
    t_all = step_cost(Fusion().apply(everything), Layout(), shape).total
    assert float(t_vllm) > float(t_all)


def test_fused_elementwise_names_graph_ops():
    data = load_preset("v6.0").model_dump(mode="json", exclude_none=True)
    data["engine"]["models"][VL]["fused_elementwise"] = ["qk_norm", "gelu"]
    with pytest.raises(SpecError, match="fused_elementwise"):
        validate_data(PresetSpec, data, file="x.yaml")


def test_cli_json_prints_samples_per_s_with_the_breakdown():
    from typer.testing import CliRunner

    from infersim.cli import app

    out = CliRunner().invoke(app, ["run", "-H", "b200", "-m", VL, "-s", "mlperf-qwen3-vl-235b-a22b-offline", "-n", "8",
                                   "--round", "v6.0", "--format", "json"])
    assert out.exit_code == 0, out.output
    d = json.loads(out.output)
    assert d["samples_per_s"] == pytest.approx(d["requests_per_s"]) and d["samples_per_s"] > 0
    assert d["breakdown"]["step_s"] > 0 and set(d["breakdown"]["by_kind_s"]) >= {"gemm", "attention"}
    assert d["config"]["tp"] == 1 and d["config"]["weights"] == "fp4"


def _vision_attention(plan, shape):
    from infersim.engine import step_cost
    cost = step_cost(plan, Layout(), shape, detail=True)
    return float(cost.by_op["vision_attention"]), cost.op_info["vision_attention"][1]


def test_fp8_vision_attention_pads_the_head_to_a_multiple_of_16():
    from infersim.graph import vision_attention_head_dim

    assert vision_attention_head_dim(72, "fp8") == 80  # Qwen3-VL's encoder heads (1152 / 16)
    assert vision_attention_head_dim(80, "fp8") == 80 and vision_attention_head_dim(128, "fp8") == 128
    assert vision_attention_head_dim(72, "bf16") == 72  # the 16-bit kernels take head 72 as it is
    # the GB300 recipe's fp8 encoder attention, at an attention efficiency (0.3, pinned: not the
    # fitted value) where it is tensor-bound: padding makes the Offline step slower
    q = api.Query.build("gb300-nvl72", VL, "mlperf-qwen3-vl-235b-a22b-offline", 4, round="v6.0")
    plan = api.base_plan(q.inputs, q.software, q.layout, q.accelerators)
    hw = plan.hardware
    plan = dataclasses.replace(plan, hardware=hw.model_copy(
        update={"efficiency": hw.efficiency.model_copy(update={"attention_fraction": 0.3})}))
    shape = Shape(prefill_seqs=2, prefill_patches=5000.0, prefill_patches_sq=7e7)
    t80, bound = _vision_attention(plan, shape)
    from infersim import graph
    old = graph.FP8_VISION_ATTENTION_HEAD_ALIGN
    try:
        graph.FP8_VISION_ATTENTION_HEAD_ALIGN = 8  # 72 is a multiple of 8: no padding
        t72, _ = _vision_attention(plan, shape)
    finally:
        graph.FP8_VISION_ATTENTION_HEAD_ALIGN = old
    assert bound == "compute" and t80 == pytest.approx(80 / 72 * t72, rel=1e-9)


def test_vision_encoder_is_sharded_over_the_attention_tp_group():
    vl = load_model(VL)
    shape = Shape(prefill_seqs=4, prefill_patches=5000.0, prefill_patches_sq=7e7)
    fmt = Formats("fp8", "fp8", "fp8")
    one = {o.name: o for o in vision_ops(vl, shape, Layout(), fmt)}
    tp4 = {o.name: o for o in vision_ops(vl, shape, Layout(tp=4, ep=4), fmt)}
    # vLLM's default mm_encoder_tp_mode 'weights': column/row-parallel linears, heads split
    for name in ("vision_encoder", "vision_attention"):
        assert float(tp4[name].flops) == pytest.approx(float(one[name].flops) / 4)
    # two all-reduces per block (attention and MLP outputs) of the step's patches' hidden states
    ar = tp4["vision_all_reduce"]
    assert float(ar.group) == 4 and float(ar.count) == 2 * 27
    assert float(ar.bytes) == pytest.approx(4 * 5000 * 1152 * 2)
    assert float(one["vision_all_reduce"].group) == 1
    # under attention DP (dp = tp) every rank encodes its own prompts' images unsharded
    adp = {o.name: o for o in vision_ops(vl, shape, Layout(tp=4, ep=4, dp=4), fmt)}
    assert float(adp["vision_attention"].flops) == pytest.approx(float(one["vision_attention"].flops) / 4)
    assert float(adp["vision_all_reduce"].group) == 1


def test_recipe_turns_off_what_its_engine_does_not_run():
    # no Qwen3-VL recipe passes vLLM's --enable-dbo: the round's overlap transform is off
    assert load_preset("v6.0").recipe_for(VL, "offline", "h200-sxm").disable == ("overlap", "disagg")
    off = api.predict("h200-sxm", VL, "mlperf-qwen3-vl-235b-a22b-offline", 8, round="v6.0")
    on = api.predict("h200-sxm", VL, "mlperf-qwen3-vl-235b-a22b-offline", 8, round="v6.0", enable=["overlap"])
    assert "overlap" not in off.config["optimizations"] and "overlap" in on.config["optimizations"]
    # TP4 all-reduces are exposed without overlap; the engine splits a step into two micro-batches
    # only where that is faster (engine.step_cost), so enabling overlap never slows it (with the
    # fourteenth session's H200 fit the split breaks even at this batch: its expert weights are
    # streamed twice)
    assert off.metrics["requests_per_s"] <= on.metrics["requests_per_s"]
    # other models keep the round's optimizations
    q = api.Query.build("b200", "llama2-70b", "mlperf-llama2-70b-offline", 8, round="v6.0")
    assert "overlap" not in api.selection(q).skipped
    assert load_preset("v6.0").recipe_for("llama2-70b", "offline", "b200").disable == ("disagg",)  # no 8-GPU run disaggregated


def test_qwen3_vl_output_length_spread():
    from infersim.serving import WorkloadStats
    from infersim.specs import load_scenario

    for kind in ("offline", "server"):
        st = WorkloadStats.from_workload(load_scenario(f"mlperf-qwen3-vl-235b-a22b-{kind}").workload, load_model(VL))
        # the notebook's mean (46 tokens) with the spread of the responses in the accuracy logs
        # (CV 0.155): the longest 1 % answer 60-70 tokens, far below the max_new_tokens cap of 150
        assert st.osl_mean == pytest.approx(46.0, abs=0.05)
        cv = (st.osl_sq / st.osl_mean**2 - 1.0) ** 0.5
        assert cv == pytest.approx(0.155, abs=0.02)
        assert 60 <= st.osl_p99 <= 70


def test_graph_sizes_are_positive_and_capture_flag_is_boolean():
    data = load_preset("v6.0").model_dump(mode="json", exclude_none=True)
    data["engine"]["models"]["llama2-70b"]["cuda_graph_batch_sizes"] = [0, 64]
    with pytest.raises(SpecError, match=r"cuda_graph_batch_sizes\.0.*greater than or equal to 1"):
        validate_data(PresetSpec, data, file="x.yaml")
    data["engine"]["models"]["llama2-70b"]["cuda_graph_batch_sizes"] = []
    validate_data(PresetSpec, data, file="x.yaml")  # an empty list: no graphs, valid
    data["engine"]["models"][VL]["graphs_capture_prompts"] = "maybe"
    with pytest.raises(SpecError, match="graphs_capture_prompts"):
        validate_data(PresetSpec, data, file="x.yaml")
