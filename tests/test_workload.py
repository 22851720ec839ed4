"""Workload lengths: quantile discretization, traces and the CLI override."""

import numpy as np
import pytest

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
    text = WorkloadStats.from_workload(sc.workload)
    multi = WorkloadStats.from_workload(sc.workload, vl)
    # one image of image_pixels: pixels / 1024 per LM token extra prompt tokens, pixels / 256 patches
    px = sc.workload.image_pixels
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
