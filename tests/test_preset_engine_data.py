"""Round presets' per-hardware engine settings against the runs' own configs
(data/mlperf_engine_settings.csv): the token budget decides how long a prompt waits at load, so a
hardware override must be what those runs used."""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from infersim.optimizations.presets import load_preset

SETTINGS = Path(__file__).resolve().parent.parent / "data" / "mlperf_engine_settings.csv"


def _most_common(version: str, benchmark: str, scenario: str, system_has: str) -> tuple[int, int]:
    """(max_batch_size, max_num_tokens) most runs of that round, benchmark, scenario and hardware used."""
    seen = Counter()
    with open(SETTINGS, encoding="utf-8") as f:
        for r in csv.DictReader(f):
            if (r["version"], r["scenario"]) == (version, scenario) and r["benchmark"].startswith(benchmark) \
                    and system_has in r["system"] and r["max_num_tokens"]:
                seen[int(float(r["max_batch_size"])), int(float(r["max_num_tokens"]))] += 1
    assert seen, (version, benchmark, scenario, system_has)
    return seen.most_common(1)[0][0]


def test_v51_llama2_70b_server_on_h200_uses_the_h200_runs_budget():
    e = load_preset("v5.1").engine_for("llama2-70b", "server", "h200-sxm")
    assert (e.max_batch_size, e.max_num_tokens, e.chunked_prefill) == (*_most_common("v5.1", "llama2-70b", "Server", "H200"), True)
    assert e.max_num_tokens == 1536


@pytest.mark.parametrize("hw,kind,expected", [
    ("b200", "server", (2048, 3584)),       # the B200 recipe the model block carries
    ("h200-sxm", "interactive", (768, 768)),  # the H200 override is Server-only (see presets/v5.1.yaml)
    ("h200-sxm", "offline", (2048, 1536)),  # Offline H200 runs: 1536 as well (24 of 24)
])
def test_v51_llama2_70b_override_does_not_leak(hw, kind, expected):
    e = load_preset("v5.1").engine_for("llama2-70b", kind, hw)
    assert (e.max_batch_size, e.max_num_tokens) == expected


@pytest.mark.parametrize("version,hw,gb", [
    ("v5.1", "b200", False), ("v5.1", "gb200-nvl72", True),
    ("v6.0", "b200", False), ("v6.0", "gb200-nvl72", True), ("v6.0", "b300", False),
])
def test_deepseek_offline_engine_is_the_hardware_runs_own(version, hw, gb):
    """DeepSeek-R1 Offline on B200/GB200 ran 512-sequence engines and on B300 1,024-sequence ones,
    not the GB300 x72 recipe's 1,536 (every B200 and GB200 run; 6 of 7 B300 runs)."""
    die = hw.upper().replace("-NVL72", "").removeprefix("G")  # B200, B300
    seen = Counter()
    with open(SETTINGS, encoding="utf-8") as f:
        for r in csv.DictReader(f):
            name = r["system"].upper()
            if (r["version"], r["benchmark"], r["scenario"]) == (version, "deepseek-r1", "Offline") \
                    and die in name and (("G" + die) in name) == gb:
                seen[int(float(r["max_batch_size"])), int(float(r["max_num_tokens"]))] += 1
    e = load_preset(version).engine_for("deepseek-r1", "offline", hw)
    assert (e.max_batch_size, e.max_num_tokens) == seen.most_common(1)[0][0]
    assert max(e.graph_sizes) == e.max_batch_size and not e.chunked_prefill


def test_deepseek_server_and_interactive_keep_the_model_recipe_where_runs_split():
    """v6.0 B200 Server runs split (Dell/Google 512/3456, Nebius 640/4608): B200 keeps the model's
    GB300 recipe in Server; GB200's Server runs agree (3 of 3 at 512/3456, graphs to 512, the
    v5.1 WIDEEP recipe) and its ``server`` block does not reach Interactive, whose runs cap 128
    sequences per rank (aggregated and GB300 decode workers) and 64 (GB200 decode workers)."""
    p = load_preset("v6.0")
    e = p.engine_for("deepseek-r1", "server", "b200")
    assert (e.max_batch_size, e.max_num_tokens) == (640, 4608)
    gb = p.engine_for("deepseek-r1", "server", "gb200-nvl72")
    assert (gb.max_batch_size, gb.max_num_tokens) == _most_common("v6.0", "deepseek-r1", "Server", "GB200") == (512, 3456)
    assert gb.graph_max == 512.0
    caps = {}
    with open(SETTINGS, encoding="utf-8") as f:
        for r in csv.DictReader(f):
            if (r["version"], r["benchmark"], r["scenario"]) == ("v6.0", "deepseek-r1", "Interactive"):
                caps[r["system"]] = int(float(r["max_batch_size"] or r["disagg_decode_max_batch_size"]))
    hw_of = {"G894-SD3-AAX7_B300-SXM-270GBx8_TRT": "b300", "GB200-NVL72_GB200-186GB_aarch64x72_TRT": "gb200-nvl72",
             "GB300-NVL72_GB300-288GB_aarch64x72_TRT": "gb300-nvl72"}
    assert set(caps) == set(hw_of)
    for system, cap in caps.items():
        inter = p.engine_for("deepseek-r1", "interactive", hw_of[system])
        assert inter.max_batch_size == cap, system
    assert p.engine_for("deepseek-r1", "interactive", "b200").max_batch_size == 128  # the B200 x8 config (1d)
    assert p.engine_for("deepseek-r1", "offline", "gb300-nvl72").max_batch_size == 1536


def _backends(version: str, scenario: str, die: str, gb: bool) -> Counter:
    """moe_backend of the DeepSeek-R1 runs of that round and scenario on that die (GB systems or not),
    x8 GB300 systems left out (the preset's gb300-nvl72 recipe is the x72 one)."""
    seen = Counter()
    with open(SETTINGS, encoding="utf-8") as f:
        for r in csv.DictReader(f):
            name = r["system"].upper()
            if (r["version"], r["benchmark"], r["scenario"]) == (version, "deepseek-r1", scenario) \
                    and die in name and (("G" + die) in name) == gb and r["moe_backend"] \
                    and not (gb and r["total_accelerators"] == "8"):
                seen[r["moe_backend"]] += 1
    return seen


@pytest.mark.parametrize("hw,kind", [(hw, k) for hw in ("b200", "b300", "gb200-nvl72", "gb300-nvl72")
                                     for k in ("server", "offline")])
def test_deepseek_moe_backend_is_the_runs_own(hw, kind):
    """v6.0 DeepSeek-R1: the MoE backend each hardware's runs used (GB200 kept v5.1's WIDEEP, GB300
    x72/x288 Offline CUTLASS, the rest CUTEDSL), and the round's MoE factor only for its own backend."""
    die = hw.upper().replace("-NVL72", "").removeprefix("G")
    runs = _backends("v6.0", kind.capitalize(), die, hw.startswith("gb"))
    assert runs, (hw, kind)
    p = load_preset("v6.0")
    recipe = p.recipe_for("deepseek-r1", kind, hw)
    assert recipe.moe_backend == runs.most_common(1)[0][0], runs
    moe = p.maturity_for(recipe)[1]
    assert moe == (p.moe_kernel_efficiency if recipe.moe_backend == p.moe_backend else 1.0)


def test_moe_factor_follows_the_backend():
    """The round's MoE factor applies to its own backend and to recipes that record none; a recipe
    on another backend gets the reference round's, 1; other stacks get 1 for all three."""
    from infersim.optimizations.presets import Recipe, Stack

    p = load_preset("v6.0").model_copy(update={"moe_kernel_efficiency": 1.3, "kernel_efficiency": 1.1})
    own = Recipe(stack=Stack.TENSORRT_LLM, moe_backend=p.moe_backend)
    assert p.maturity_for(own)[:2] == (1.1, 1.3)
    assert p.maturity_for(Recipe(stack=Stack.TENSORRT_LLM))[:2] == (1.1, 1.3)
    assert p.maturity_for(Recipe(stack=Stack.TENSORRT_LLM, moe_backend="WIDEEP"))[:2] == (1.1, 1.0)
    assert p.maturity_for(Recipe(stack=Stack.VLLM, moe_backend=p.moe_backend)) == (1.0, 1.0, 1.0)
    unset = p.model_copy(update={"moe_backend": None})
    assert unset.maturity_for(Recipe(stack=Stack.TENSORRT_LLM, moe_backend="WIDEEP"))[:2] == (1.1, 1.3)


def test_unknown_moe_backend_is_a_clear_error(tmp_path):

    from infersim.errors import SpecError
    from infersim.optimizations.presets import presets_dir

    src = (presets_dir() / "v6.0.yaml").read_text(encoding="utf-8")
    bad = tmp_path / "v6.0.yaml"
    bad.write_text(src.replace("moe_backend: WIDEEP,", "moe_backend: FASTEST,", 1), encoding="utf-8")
    with pytest.raises(SpecError) as exc:
        load_preset("v6.0", tmp_path)
    assert "moe_backend" in str(exc.value) and "FASTEST" in str(exc.value)


def _graph_runs(version: str, benchmark: str, scenario: str, die: str, gb: bool) -> Counter:
    """cuda_graphs of the runs of that round, benchmark and scenario on that die (GB systems or not)."""
    seen = Counter()
    with open(SETTINGS, encoding="utf-8") as f:
        for r in csv.DictReader(f):
            name = r["system"].upper()
            if (r["version"], r["scenario"]) == (version, scenario) and r["benchmark"].startswith(benchmark) \
                    and die in name and (("G" + die) in name) == gb and r["cuda_graphs"]:
                seen[r["cuda_graphs"].split()[0].lower() == "true" or bool(r["cuda_graph_batch_sizes"])] += 1
    return seen


@pytest.mark.parametrize("version,model,hw,kind", [
    (v, m, hw, k) for v in ("v5.1", "v6.0") for m in ("llama2-70b", "llama3.1-405b")
    for hw in ("b200", "h200-sxm") for k in ("server", "offline", "interactive")
] + [("v6.0", m, "b300", k) for m in ("llama2-70b", "llama3.1-405b") for k in ("server", "offline", "interactive")]
  + [("v5.1", "llama3.1-8b", hw, k) for hw in ("b200", "h200-sxm") for k in ("server", "offline")])
def test_cuda_graphs_are_the_runs_own(version, model, hw, kind):
    """A preset captures CUDA graphs exactly where that hardware's runs did (TensorRT-engine runs of
    Llama-2-70B and Llama-3.1-405B use none; Llama-3.1-8B on B200 does, on H200 not)."""
    die = hw.split("-")[0].upper()
    runs = _graph_runs(version, model, kind.capitalize(), die, False)
    if not runs:
        pytest.skip(f"no {version} {model} {kind} run on {die} records cuda_graphs")
    graphs = runs.most_common(1)[0][0]
    e = load_preset(version).engine_for(model, kind, hw)
    assert (e.graph_max != 0.0) == graphs, (runs, e.graph_sizes)


def test_empty_graph_list_means_no_graphs():
    from infersim.plan import Engine

    assert Engine(graph_sizes=()).graph_max == 0.0
    assert Engine(graph_sizes=None).graph_max is None
    assert Engine(graph_sizes=(64, 128)).graph_max == 128.0


def test_reports_say_which_iterations_replay_a_graph():
    from infersim import api

    eager = api.predict("b200", "llama3.1-405b", "mlperf-llama3.1-405b-interactive", 8, round="v5.1")
    assert eager.config["cuda_graphs"].startswith("none")
    captured = api.predict("b200", "llama3.1-8b", "mlperf-llama3.1-8b-server", 8, round="v5.1")
    assert captured.config["cuda_graphs"].startswith("decode-only") and "eagerly" in captured.config["cuda_graphs"]


@pytest.mark.parametrize("scenario", ["Server", "Offline", "Interactive"])
def test_v60_deepseek_r1_runs_mtp_and_disaggregation_only_where_its_runs_did(scenario):
    """The v6.0 DeepSeek-R1 recipes offer MTP and disaggregation (preset ``choices``) only in the scenario
    whose runs used them: every Server and Offline run was aggregated without speculative decoding,
    every Interactive run used MTP 3 (columns serving_mode, speculative_decoding)."""
    with open(SETTINGS, encoding="utf-8") as f:
        runs = [r for r in csv.DictReader(f)
                if (r["version"], r["benchmark"], r["scenario"]) == ("v6.0", "deepseek-r1", scenario)]
    assert runs
    spec = {r["speculative_decoding"] for r in runs}
    disagg = {r["serving_mode"].startswith("disaggregated") for r in runs}
    p = load_preset("v6.0")
    assert {"mtp", "disagg"} <= {c["kind"] for c in p.choices}
    for hw in ("b200", "b300", "gb200-nvl72", "gb300-nvl72"):
        off = set(p.recipe_for("deepseek-r1", scenario.lower(), hw).disable)
        assert ("mtp" in off) == (spec == {""}), (hw, spec)
        if disagg == {False}:  # where some runs were disaggregated, see the next test
            assert "disagg" in off, hw


def test_v60_deepseek_r1_server_capacity_runs_the_aggregated_recipe_without_mtp():
    from infersim.api import predict

    p = predict("gb300-nvl72", "deepseek-r1", "mlperf-deepseek-r1-server", 72, round="v6.0")
    assert p.feasible and not p.config["disaggregated"] and p.config["mtp_depth"] == 0
    assert "mtp" not in p.config["optimizations"]


def test_v60_disaggregation_is_a_choice_only_where_its_runs_disaggregated():
    """Only NVIDIA's GB200 / GB300 NVL72 x72 runs were disaggregated (column serving_mode): the v6.0
    recipes offer disagg for those models and scenarios on those racks and nowhere else."""
    bench = {"llama2-70b-99": "llama2-70b", "llama2-70b-99.9": "llama2-70b", "llama3.1-405b": "llama3.1-405b",
             "deepseek-r1": "deepseek-r1", "gpt-oss-120b": "gpt-oss-120b", "llama3.1-8b": "llama3.1-8b",
             "mixtral-8x7b": "mixtral-8x7b", "qwen3-vl-235b-a22b": "qwen3-vl-235b-a22b"}
    rack = {"GB200-NVL72": "gb200-nvl72", "GB300-NVL72": "gb300-nvl72"}
    disagg, seen = set(), set()
    with open(SETTINGS, encoding="utf-8") as f:
        for r in csv.DictReader(f):
            if r["version"] != "v6.0" or r["benchmark"] not in bench:
                continue
            key = (bench[r["benchmark"]], r["scenario"].lower())
            seen.add(key)
            if r["serving_mode"].startswith("disaggregated"):
                hw = next(h for prefix, h in rack.items() if r["system"].startswith(prefix))
                assert int(r["total_accelerators"]) == 72, r["system"]
                disagg.add((*key, hw))
    assert len(disagg) == 12  # llama2-70b and 405B Server + Interactive, DeepSeek-R1 and gpt-oss Interactive, on both racks
    p = load_preset("v6.0")
    for model, kind in seen:
        for hw in ("b200", "b300", "h200-sxm", "mi300x", "gb200-nvl72", "gb300-nvl72"):
            allowed = "disagg" not in p.recipe_for(model, kind, hw).disable
            assert allowed == ((model, kind, hw) in disagg), (model, kind, hw)


def _extras(version: str, scenario: str, system_has: str) -> Counter:
    """The `extra` build flags of the round's Llama-2-70B runs of that scenario on that hardware."""
    seen = Counter()
    with open(SETTINGS, encoding="utf-8") as f:
        for r in csv.DictReader(f):
            if (r["version"], r["scenario"]) == (version, scenario) and r["benchmark"].startswith("llama2-70b") \
                    and system_has in r["system"] and not any(g in r["system"] for g in ("GB200", "GB300")):
                seen["norm_quant_fusion" if "norm_quant_fusion=enable" in r["extra"] else r["extra"]] += 1
    return seen


@pytest.mark.parametrize("version,hw,system", [("v5.1", "b200", "B200"), ("v6.0", "b200", "B200"), ("v6.0", "b300", "B300")])
def test_llama2_interactive_engines_are_the_runs_own_fp4_plugin_builds(version, hw, system):
    """Blackwell Llama-2-70B Interactive runs are 768/768 `gemm_plugin=fp4` builds without the
    Server and Offline builds' norm + FP4-quantize fusion: their two RMSNorms per layer stay
    separate kernels (priced), everything else fused; Server keeps every elementwise op fused."""
    assert _extras(version, "Interactive", system) == Counter({"gemm_plugin=fp4": sum(_extras(version, "Interactive", system).values())})
    assert set(_extras(version, "Server", system)) == {"norm_quant_fusion"}
    preset = load_preset(version)
    inter, server = preset.engine_for("llama2-70b", "interactive", hw), preset.engine_for("llama2-70b", "server", hw)
    assert (inter.max_batch_size, inter.max_num_tokens) == _most_common(version, "llama2-70b", "Interactive", system) == (768, 768)
    assert inter.fused_elementwise is not None
    assert {"input_norm", "post_attn_norm"}.isdisjoint(inter.fused_elementwise)
    assert {"mlp_act", "residual_add", "rope", "sampling"} <= set(inter.fused_elementwise)
    assert server.fused_elementwise is None  # every fusable op folded


@pytest.mark.parametrize("version,hw,system_has,kind", [
    ("v6.0", "b200", "B200", "offline"), ("v6.0", "b200", "B200", "server"),
    ("v5.1", "h200-sxm", "H200", "offline"), ("v5.1", "h200-sxm", "H200", "server"),
    ("v5.1", "mi300x", "MI300X", "offline"), ("v5.1", "mi325x", "MI325X", "offline"),
])
def test_mixtral_engines_are_the_runs_own(version, hw, system_has, kind):
    """Mixtral's batch cap and token budget are what most of that round's runs on the hardware used
    (until 2026-11-27 the presets ran TensorRT-LLM's default 2,048 sequences, and vLLM defaults on
    AMD Offline, where the runs allowed up to 6,144)."""
    e = load_preset(version).engine_for("mixtral-8x7b", kind, hw)
    assert (e.max_batch_size, e.max_num_tokens) == _most_common(version, "mixtral-8x7b", kind.capitalize(), system_has)


@pytest.mark.parametrize("hw,kind,batch", [("h100-sxm", "server", 896), ("h100-sxm", "offline", 896),
                                           ("h200-sxm", "offline", 3072), ("h200-sxm", "server", 1200)])
def test_v41_mixtral_engines_are_nvidias_v41_configs(hw, kind, batch):
    """v4.1 Mixtral engines of shared/reference/mlperf_submission_configs.md section 4 (NVIDIA's v4.1
    configs): H100 at 896 sequences, H200 at 3,072 Offline / 1,200 Server."""
    assert load_preset("v4.1").engine_for("mixtral-8x7b", kind, hw).max_batch_size == batch


@pytest.mark.parametrize("hw,system_has", [("h100-sxm", "H100"), ("l40s", "l40s")])
@pytest.mark.parametrize("kind,scenario", [("offline", "Offline"), ("server", "Server")])
def test_v51_llama31_8b_on_h100_and_l40s_is_red_hats_vllm_engine(hw, system_has, kind, scenario):
    """The round's only H100 SXM and L40S Llama-3.1-8B runs are Red Hat's vLLM SUTs: their batch
    cap and token budget, vLLM as the stack, no GEMM-epilogue fusion; the B200 recipe elsewhere."""
    preset = load_preset("v5.1")
    e = preset.engine_for("llama3.1-8b", kind, hw)
    assert (e.max_batch_size, e.max_num_tokens) == _most_common("v5.1", "llama3.1-8b", scenario, system_has)
    assert e.chunked_prefill and e.fused_elementwise == ()
    assert e.graph_sizes[0] == 1 and e.graph_sizes[-1] == 512
    assert preset.recipe_for("llama3.1-8b", kind, hw).stack == "vllm"
    b200 = preset.engine_for("llama3.1-8b", kind, "b200")
    assert (b200.max_batch_size, b200.max_num_tokens, b200.fused_elementwise) == (6000, 12000, None)
    assert preset.recipe_for("llama3.1-8b", kind, "b200").stack == "tensorrt-llm"


@pytest.mark.parametrize("hw,kind", [("b200", "offline"), ("b200", "server"), ("gb200-nvl72", "offline")])
def test_v60_llama2_70b_on_b200_and_gb200_is_the_v51_b200_engine(hw, kind):
    """v6.0's B200 (HPE, Supermicro) and GB200 Offline (NVIDIA) Llama-2-70B runs kept 2,048 / 3,584;
    B300 and GB300 ran 3,072 / 4,608 (the model block's)."""
    system = "B200" if hw == "b200" else "GB200"
    e = load_preset("v6.0").engine_for("llama2-70b", kind, hw)
    assert (e.max_batch_size, e.max_num_tokens) == _most_common("v6.0", "llama2-70b", kind.capitalize(), system) == (2048, 3584)
    assert (load_preset("v6.0").engine_for("llama2-70b", kind, "b300").max_batch_size) == 3072


@pytest.mark.parametrize("hw,scenario,n,cap,tp", [
    ("l40s", "offline", 8, 1024, 4),      # Fujitsu CDI_L40Sx8: TP4, gpu_batch_size 1024
    ("h100-pcie", "server", 8, 896, 2),   # ASUSTeK ESC8000A: the base TP2, gpu_batch_size 896
    ("h100-sxm", "offline", 8, 896, 2),   # NVIDIA H100_SXM_80GB_TP2x4
    ("h200-sxm", "server", 8, 896, 1),    # NVIDIA H200_SXM_141GBx8: TP1
])
def test_v41_llama2_70b_runs_the_configs_tensor_parallelism_within_the_published_batch_cap(hw, scenario, n, cap, tp):
    """The v4.x NVIDIA harness set pipeline_parallelism = 1 and a tensor_parallelism per system in its
    Llama-2-70B configs (partners inherit the base TP2 or set their own): the search runs that layout
    on every part, PCIe ones included (at TP1 the PCIe parts cross no link at all, at TP4 L40S's
    all-reduces cross PCIe), and each instance's batch within the config's gpu_batch_size."""
    from infersim import api

    assert load_preset("v4.1").engine_for("llama2-70b", scenario, hw).max_batch_size == cap
    p = api.predict(hw, "llama2-70b", f"mlperf-llama2-70b-{scenario}", n, round="v4.1")
    g = p.result
    assert np.all(g.layouts["pp"] == 1)
    assert set(g.layouts["tp"][np.any(g.ok, axis=-1)].tolist()) == {tp}
    per_rank = g.batch[None, :] / g.layouts["dp"][:, None]
    assert np.all(per_rank[g.ok] <= cap)


@pytest.mark.parametrize("scenario", ["offline", "server", "interactive"])
@pytest.mark.parametrize("hw", ["b200", "gb200-nvl72", "h200-sxm"])
def test_v50_llama31_405b_engine_is_the_next_rounds_recipe(hw, scenario):
    """The v5.0 configs are not read: Llama 3.1 405B (new in v5.0) runs the NVIDIA harness's engine
    limits of v5.1 (batch cap, token budget, no CUDA graphs), not the TensorRT-LLM build defaults,
    on every part the round ran it on; the other models keep the round's defaults."""
    v50, v51 = load_preset("v5.0"), load_preset("v5.1")
    e50, e51 = v50.engine_for("llama3.1-405b", scenario, hw), v51.engine_for("llama3.1-405b", scenario, hw)
    assert (e50.max_batch_size, e50.max_num_tokens, e50.graph_sizes) == (e51.max_batch_size, e51.max_num_tokens, e51.graph_sizes)
    assert e50.max_num_tokens < 8192 and e50.graph_sizes == ()
    assert v50.engine_for("llama2-70b", scenario, hw).max_num_tokens == 8192


def _amd_layouts(benchmark: str, system_has: str) -> set[tuple[int, int]]:
    """(tensor_parallel_size, GPUs per instance) of every v5.1 run of ``benchmark`` on a system
    whose name holds ``system_has`` (instances × GPUs per instance = the system's GPUs)."""
    seen = set()
    with open(SETTINGS, encoding="utf-8") as f:
        for r in csv.DictReader(f):
            if r["version"] == "v5.1" and r["benchmark"].startswith(benchmark) and system_has in r["system"].upper():
                seen.add((int(r["tensor_parallel_size"]), int(r["total_accelerators"]) // int(r["instances"])))
    return seen


@pytest.mark.parametrize("model", ["llama2-70b", "mixtral-8x7b"])
@pytest.mark.parametrize("hw,system_has", [("mi300x", "MI300X"), ("mi325x", "MI325X")])
def test_v51_amd_runs_one_tp1_engine_per_gpu_as_their_configs(model, hw, system_has):
    """Every v5.1 AMD-harness run of Llama-2-70B and Mixtral on MI300X / MI325X ran one TP1 engine per
    GPU (mlperf_engine_settings.csv): the preset's recipe pins that layout for every scenario, so the
    search cannot pick a layout none of the runs used (the Interactive search had picked TP8 and
    predicted the AMD MI300X run +46 %)."""
    from infersim import api

    assert _amd_layouts(model, system_has) == {(1, 1)}
    for kind in ("offline", "server", "interactive"):
        r = load_preset("v5.1").recipe_for(model, kind, hw)
        assert (r.tp, r.pp) == (1, 1), kind
    p = api.predict(hw, "llama2-70b", "mlperf-llama2-70b-interactive", 8, round="v5.1")
    g = p.result
    assert set(g.layouts["tp"][np.any(g.ok, axis=-1)].tolist()) == {1}
    assert np.all(g.layouts["pp"] == 1) and p.config["replicas"] == 8
