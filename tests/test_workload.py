"""Workload lengths: quantile discretization, traces and the CLI override."""

import numpy as np
import pytest
import yaml

from infersim.api import load_inputs, predict
from infersim.errors import SpecError
from infersim.specs import load_scenario
from infersim.specs.scenario import LengthSpec, load_trace


def test_mean_only_is_fixed_length():
    x, p = LengthSpec(mean=300).support
    assert x.tolist() == [300.0] and p.tolist() == [1.0]


def test_mean_and_cap_alone_keep_the_mean_fixed():
    # a cap says nothing about the shape: the length stays at the mean
    x, _ = LengthSpec(mean=294, max=1024).support
    assert x.tolist() == [294.0]


def test_quantiles_keep_the_mean_and_the_order():
    spec = LengthSpec(mean=3752, p50=2194, p90=9477, max=20000)
    x, p = spec.support
    assert np.isclose(np.sum(x * p), 3752)
    assert spec.quantile(0.5) < spec.quantile(0.9) < spec.quantile(0.99)


def test_trace_histogram_matches_file(tmp_path):
    f = tmp_path / "t.csv"
    f.write_text("isl,osl\n100,10\n300,30\n300,50\n")
    isl, osl = load_trace(f)
    # isl mean (100 + 300 + 300) / 3 = 233.3; osl mean (10 + 30 + 50) / 3 = 30
    assert isl.mean == pytest.approx(700 / 3) and osl.mean == pytest.approx(30)
    x, p = isl.support
    assert x.tolist() == [100, 300] and p.tolist() == pytest.approx([1 / 3, 2 / 3])


@pytest.mark.parametrize("text,needle", [("a,b\n1,2\n", "columns"), ("isl,osl\n1,x\n", "row 2, column osl"),
                                         ("isl,osl\n-5,3\n", "row 2, column isl"), ("isl,osl\n", "no rows")])
def test_bad_trace_is_a_spec_error(tmp_path, text, needle):
    f = tmp_path / "t.csv"
    f.write_text(text)
    with pytest.raises(SpecError, match=needle):
        load_trace(f)


def test_bundled_trace_scenario_loads_relative_to_its_file():
    sc = load_scenario("chat-trace")
    assert sc.workload.isl.histogram and sc.workload.osl.histogram
    assert sc.workload.isl.mean > 0


def test_heavier_tail_raises_p99_tpot():
    # same mean output length; a heavy tail puts short requests (few cycles, noisier TPOT) in the mix
    fixed = predict("h200-sxm", "llama3.1-8b", "chat-1k-1k", 8, round="v5.1", batch=256, tp=1)
    inputs = load_inputs("h200-sxm", "llama3.1-8b", "chat-1k-1k")
    wl = inputs.scenario.workload.model_copy(update={"osl": LengthSpec(mean=1024, p50=400, p90=2500, p99=6000)})
    tailed_inputs = inputs.__class__(**{**inputs.__dict__, "scenario": inputs.scenario.model_copy(update={"workload": wl})})
    tailed = predict(None, None, None, 8, round="v5.1", batch=256, tp=1, inputs=tailed_inputs)
    assert fixed.feasible and tailed.feasible
    assert tailed.metrics["tpot_s"] / tailed.metrics["tpot_mean_s"] > fixed.metrics["tpot_s"] / fixed.metrics["tpot_mean_s"]


def test_images_add_lm_tokens_and_vision_encoder_work():
    from infersim.graph import Formats, Layout, Shape, build_graph
    from infersim.serving import WorkloadStats
    from infersim.specs import load_model

    sc = load_scenario("mlperf-qwen3-vl-235b-a22b-offline")
    vl = load_model("qwen3-vl-235b-a22b")
    px = 1000.0 * 1000.0
    wl = sc.workload.model_copy(update={"image_tokens": None, "image_pixels": px})
    text = WorkloadStats.from_workload(wl)
    multi = WorkloadStats.from_workload(wl, vl)
    # one 1000x1000 image: pixels / 1024 per LM token extra prompt tokens, pixels / 256 patches
    assert multi.isl_mean == pytest.approx(text.isl_mean + px / 1024)
    assert multi.vision_patches == pytest.approx(px / 256)
    g = build_graph(vl, Shape(prefill_seqs=1, prefill_len=1524, prefill_len_sq=1524**2, prefill_patches=4096),
                    Layout(), Formats("bf16", "bf16", "bf16"))
    ops = {o.name: o for o in g.ops}
    # blocks (4h² + 2hI per layer) on all 4096 patches, the merger MLPs on the 1024 merged tokens,
    # and full attention within the image 4 · 4096² · 1152 · 27 as an attention kernel
    blocks = 27 * (4 * 1152**2 + 2 * 1152 * 4304)
    assert float(ops["vision_encoder"].flops) == pytest.approx(2 * blocks * 4096 + 2 * (0.58e9 - blocks) * 1024)
    assert float(ops["vision_attention"].flops) == pytest.approx(4 * 4096**2 * 1152 * 27)
    # a text model ignores the images
    assert WorkloadStats.from_workload(sc.workload, load_model("qwen3-235b-a22b")).vision_patches == 0


def test_vision_encoder_flops_of_a_1000_by_1000_image_by_hand():
    from infersim.graph import Formats, Layout, Shape, vision_ops
    from infersim.specs import load_model

    vl = load_model("qwen3-vl-235b-a22b")
    p = 1000 * 1000 / 256  # 16x16-pixel patches: 62.5 x 62.5 = 3,906.25
    ops = {o.name: o for o in vision_ops(vl, Shape(prefill_seqs=1, prefill_patches=p), Layout(), Formats("bf16", "bf16", "bf16"))}
    # per block: q, k, v, o projections 4·1152² and the MLP 2·1152·4304 multiply-adds per patch
    per_patch_macs = 27 * (4 * 1152 * 1152 + 2 * 1152 * 4304)
    assert per_patch_macs == 411_070_464
    merger = 0.58e9 - per_patch_macs  # patch embed, 1 merger + 3 DeepStack mergers on the 976.6 merged tokens
    assert float(ops["vision_encoder"].flops) == pytest.approx(2 * per_patch_macs * p + 2 * merger * p / 4)
    assert float(ops["vision_encoder"].flops) == pytest.approx(3.54e12, rel=0.005)
    # QK^T and PV over all patch pairs of the image: 2 · 2 · P² · 1152 per layer, 27 layers
    assert float(ops["vision_attention"].flops) == pytest.approx(4 * p * p * 1152 * 27)
    assert float(ops["vision_attention"].flops) == pytest.approx(1.8985e12, rel=0.001)


def test_image_size_mix_costs_the_mean_square_in_encoder_attention():
    from infersim.graph import Formats, Layout, Shape, vision_ops
    from infersim.serving import WorkloadStats
    from infersim.specs import load_model
    from infersim.specs.scenario import LengthSpec

    sc = load_scenario("mlperf-qwen3-vl-235b-a22b-offline")
    vl = load_model("qwen3-vl-235b-a22b")
    # half the images 500 LM tokens, half 3,500: mean 2,000, E[v²] = (500² + 3500²)/2 = 6.25e6
    mix = LengthSpec(mean=2000, histogram=[(500, 1), (3500, 1)])
    wl = sc.workload.model_copy(update={"image_tokens": mix, "image_pixels": None,
                                         "isl": LengthSpec(mean=800, histogram=[(600, 1), (1000, 1)])})
    st = WorkloadStats.from_workload(wl, vl)
    assert st.vision_patches == pytest.approx(4 * 2000)
    assert st.vision_patches_sq == pytest.approx(16 * 6.25e6)
    # prompt = text + image tokens, independent: E[(T+V)²] = E[T²] + 2·E[T]·E[V] + E[V²]
    assert st.isl_mean == pytest.approx(2800)
    assert st.isl_sq == pytest.approx((600**2 + 1000**2) / 2 + 2 * 800 * 2000 + 6.25e6)
    assert sorted(st.isl_points.tolist()) == [1100, 1500, 4100, 4500]
    assert st.isl_max == pytest.approx(1000 + 3500)
    lay, fmt = Layout(), Formats("bf16", "bf16", "bf16")
    mixed = {o.name: o for o in vision_ops(vl, Shape(prefill_seqs=1, prefill_patches=st.vision_patches,
                                                      prefill_patches_sq=st.vision_patches_sq), lay, fmt)}
    mean_size = {o.name: o for o in vision_ops(vl, Shape(prefill_seqs=1, prefill_patches=st.vision_patches), lay, fmt)}
    # the linear work follows the mean patches; attention the mean square (6.25e6 / 2000² = 1.5625x)
    assert float(mixed["vision_encoder"].flops) == pytest.approx(float(mean_size["vision_encoder"].flops))
    assert float(mixed["vision_attention"].flops) == pytest.approx(4 * 16 * 6.25e6 * 1152 * 27)
    assert float(mixed["vision_attention"].flops) / float(mean_size["vision_attention"].flops) == pytest.approx(1.5625)


def test_bundled_qwen3_vl_request_shape():
    from infersim.serving import WorkloadStats
    from infersim.specs import load_model

    for kind in ("offline", "server"):
        st = WorkloadStats.from_workload(load_scenario(f"mlperf-qwen3-vl-235b-a22b-{kind}").workload,
                                         load_model("qwen3-vl-235b-a22b"))
        # notebook histograms: 855 text + 1,289 image tokens; images capped at 16,384 LM tokens
        assert st.isl_mean == pytest.approx(855 + 1289, rel=0.02)
        assert st.vision_patches == pytest.approx(4 * 1289, rel=0.02)
        assert st.vision_patches_sq > 2.5 * st.vision_patches ** 2  # heavy tail of large images
        assert st.isl_max <= 20922 + 16384
        assert len(st.isl_points) == 64 and np.sum(st.isl_probs * st.isl_points) == pytest.approx(st.isl_mean)


def test_image_pixels_and_image_tokens_are_exclusive(tmp_path):
    from infersim.errors import SpecError

    sc = load_scenario("mlperf-qwen3-vl-235b-a22b-offline")
    data = sc.model_dump(mode="json", exclude_none=True)
    data["workload"]["image_pixels"] = 1e6
    f = tmp_path / "both.yaml"
    f.write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError, match="image_pixels .* or image_tokens"):
        load_scenario(str(f))


def test_qwen3_vl_samples_per_s_is_tokens_per_s_over_mean_osl():
    from infersim.accuracy.data import resolve_preset
    from infersim.workloads.validate import MetricRow, predict_row

    sc = load_scenario("mlperf-qwen3-vl-235b-a22b-offline")
    p = predict("b200", "qwen3-vl-235b-a22b", "mlperf-qwen3-vl-235b-a22b-offline", 8, round="v6.0")
    assert p.feasible
    from infersim.serving import WorkloadStats
    from infersim.specs import load_model

    osl_mean = WorkloadStats.from_workload(sc.workload, load_model("qwen3-vl-235b-a22b")).osl_mean
    assert osl_mean == pytest.approx(sc.workload.osl.mean, rel=1e-3)  # the histogram keeps the stated mean
    # one sample = one request; the published metric is completed samples/s of the whole system
    assert p.metrics["requests_per_s"] == pytest.approx(p.metrics["tokens_per_s"] / osl_mean)
    row = MetricRow("v6.0", "b200", "qwen3-vl-235b-a22b", "offline", 8, "samples_per_s", 79.0,
                    "mlperf-qwen3-vl-235b-a22b-offline")
    predict_row(row)
    assert resolve_preset("v6.0") == "v6.0"  # the row is predicted with the v6.0 preset, as p
    assert row.predicted == pytest.approx(p.metrics["requests_per_s"])
