"""Non-LLM workloads (WAN-2.2 text-to-video, DLRMv3): shapes and FLOPs by hand, layout and
batching behaviour, the run/validate CLI contract, bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest

from infersim.cli import app
from infersim.graph import Formats, Layout, Shape, vision_ops
from infersim.specs import catalog
from infersim.workloads import diffusion, predict, recsys
from infersim.workloads.validate import load_metric_rows, summarize, MetricRow

from conftest import REPO

WAN, DLRM = "wan2.2-t2v-a14b", "dlrm-v3"


@pytest.fixture(scope="module")
def wan():
    return catalog.load("model", WAN)


@pytest.fixture(scope="module")
def dlrm():
    return catalog.load("model", DLRM)


@pytest.fixture(scope="module")
def b200():
    return catalog.load("hardware", "b200")


# ---- WAN-2.2 -----------------------------------------------------------------------------------


def test_wan_expert_is_14b_and_latent_is_75600_tokens(wan):
    # 40 blocks x (4h² self-attn + 4h² cross-attn + 2·h·ffn), h 5120, ffn 13824 (the "A14B")
    assert wan.transformer.params_per_expert / 1e9 == pytest.approx(14.0, rel=0.02)
    wl = catalog.load("scenario", "mlperf-wan2.2-t2v-offline").workload
    s = diffusion.video_shape(wan, wl)
    # 81 frames -> 1 + 80/4 = 21 latent frames; 720/8 x 1280/8 = 90 x 160; patch 1x2x2
    assert (s.latent_frames, s.latent_height, s.latent_width, s.tokens) == (21, 90, 160, 21 * 45 * 80)


def _with_eff(hw, **kw):
    return hw.model_copy(update={"efficiency": hw.efficiency.model_copy(update=kw)})


def test_wan_forward_attention_time_by_hand(wan, b200):
    # MMA at dense_attention_fraction of the FP8 peak, then the softmax's exponentials on the SFU
    # at its full rate (softmax_overlap 0): one exp per score element and head
    wl = catalog.load("scenario", "mlperf-wan2.2-t2v-offline").workload
    shape = diffusion.video_shape(wan, wl)
    fwd = diffusion.dit_forward(wan, shape, b200, "fp8", 1.0)
    S, h, L, T, heads = shape.tokens, 5120, 40, 512, 40
    eff = b200.efficiency
    assert (eff.dense_attention_fraction, eff.softmax_overlap) == (0.75, 0.0)
    rate = b200.compute.flop_rate("fp8")
    # self-attention 4·S²·h and cross-attention 4·S·T·h per block, both compute bound at this size
    mma = L * (4.0 * S * S * h + 4.0 * S * T * h) / (eff.dense_attention_fraction * rate)
    sfu = L * (S * S * heads + S * T * heads) / b200.compute.exp_rate
    assert float(fwd.by_kind["attention"]) == pytest.approx(mma + sfu, rel=1e-6)
    assert float(fwd.by_kind["comm"]) == 0.0  # one rank: no Ulysses all-to-all


def test_wan_attention_ignores_the_llm_fitted_attention_fraction(wan, b200):
    # the LLM fit's attention_fraction (paged decode, short prefills) is not read by the
    # long-sequence attention of the non-LLM workloads; dense_attention_fraction is
    wl = catalog.load("scenario", "mlperf-wan2.2-t2v-offline").workload
    shape = diffusion.video_shape(wan, wl)
    t = lambda hw: float(diffusion.dit_forward(wan, shape, hw, "fp8", 1.0).by_kind["attention"])  # noqa: E731
    assert t(_with_eff(b200, attention_fraction=0.15)) == pytest.approx(t(b200), rel=1e-12)
    assert t(_with_eff(b200, dense_attention_fraction=0.375)) > 1.2 * t(b200)


def test_softmax_overlap_spans_serial_to_max(wan, b200):
    # overlap 0: MMA + SFU; overlap 1: max(MMA, SFU); no SFU rate: the MMA time alone
    wl = catalog.load("scenario", "mlperf-wan2.2-t2v-offline").workload
    shape = diffusion.video_shape(wan, wl)
    S, h, L, T, heads = shape.tokens, 5120, 40, 512, 40
    mma = L * (4.0 * S * S * h + 4.0 * S * T * h) / (0.75 * b200.compute.flop_rate("fp8"))
    sfu = L * (S * S * heads + S * T * heads) / b200.compute.exp_rate
    t = lambda hw: float(diffusion.dit_forward(wan, shape, hw, "fp8", 1.0).by_kind["attention"])  # noqa: E731
    assert sfu > mma  # FP8 at head 128 on B200: the exponentials are the longer phase
    assert t(_with_eff(b200, softmax_overlap=1.0)) == pytest.approx(sfu, rel=1e-6)
    assert t(_with_eff(b200, softmax_overlap=0.5)) == pytest.approx(0.5 * mma + sfu, rel=1e-6)
    no_sfu = b200.model_copy(update={"compute": b200.compute.model_copy(
        update={"exp_rate_tera_per_s": None, "exp_rate_source": None})})
    assert t(no_sfu) == pytest.approx(mma, rel=1e-6)


def test_blackwell_ultra_doubles_the_sfu_and_shortens_fp8_attention(wan):
    # B300 has B200's FP8 peak but twice the exponentials per clock: only the SFU term halves
    wl = catalog.load("scenario", "mlperf-wan2.2-t2v-offline").workload
    shape = diffusion.video_shape(wan, wl)
    t = {hw: float(diffusion.dit_forward(wan, shape, catalog.load("hardware", hw), "fp8", 1.0).by_kind["attention"])
         for hw in ("b200", "b300")}
    assert 1.3 < t["b200"] / t["b300"] < 1.6


def test_workload_gemms_run_at_the_measured_mamf(wan, b200):
    # GEMMs read compute.mamf_fraction for their precision, not the LLM-fitted compute_fraction;
    # a profile without a MAMF measurement falls back to compute_fraction
    wl = catalog.load("scenario", "mlperf-wan2.2-t2v-offline").workload
    shape = diffusion.video_shape(wan, wl)
    g = lambda hw: float(diffusion.dit_forward(wan, shape, hw, "fp8", 1.0).by_kind["gemm"])  # noqa: E731
    assert b200.compute.mamf("fp8") == 0.763 and b200.compute.mamf("fp16") == 0.776
    assert g(_with_eff(b200, compute_fraction=0.4)) == pytest.approx(g(b200), rel=1e-12)
    unmeasured = b200.model_copy(update={"compute": b200.compute.model_copy(
        update={"mamf_fraction": None, "mamf_source": None})})
    ratio = g(unmeasured) / g(b200)
    assert ratio == pytest.approx(0.763 / b200.efficiency.compute_fraction, rel=0.02)


@pytest.mark.parametrize("model,scenario,tray,hgx", [
    (WAN, "mlperf-wan2.2-t2v-offline", "gb200-nvl72", "b200"),
    (WAN, "mlperf-wan2.2-t2v-offline", "gb300-nvl72", "b300"),
    (DLRM, "mlperf-dlrm-v3-offline", "gb200-nvl72", "b200")])
def test_rack_gpu_is_its_hgx_die_at_higher_clocks(model, scenario, tray, hgx):
    # a GB200 (GB300) GPU is the B200 (B300) die at a higher power limit (2500 vs 2250 dense BF16
    # TFLOPS): per GPU it is 1.0-1.2x its HGX sibling (published WAN single-GPU video 167 vs 143 s,
    # 128 vs 108 s; DLRMv3 1,453 vs 1,306-1,342 samples/s/GPU), never slower
    n = 8
    a = predict(tray, model, scenario, n).metrics["samples_per_s_per_accelerator"]
    b = predict(hgx, model, scenario, n).metrics["samples_per_s_per_accelerator"]
    assert 1.0 < a / b < 1.25


def test_ulysses_splits_work_and_adds_all_to_all(wan, b200):
    wl = catalog.load("scenario", "mlperf-wan2.2-t2v-offline").workload
    shape = diffusion.video_shape(wan, wl)
    u = np.array([1.0, 2.0, 4.0, 8.0])
    fwd = diffusion.dit_forward(wan, shape, b200, "fp8", u)
    total = np.asarray(fwd.total)
    assert np.all(np.diff(total) < 0)  # more ranks, faster
    assert np.all(total[1:] * u[1:] > total[0])  # but never super-linear: communication is paid
    comm = np.asarray(fwd.by_kind["comm"])
    assert comm[0] == 0 and np.all(comm[1:] > 0)


def test_wan_offline_is_data_parallel_and_singlestream_uses_all_gpus():
    off = predict("b200", WAN, "mlperf-wan2.2-t2v-offline", 8)
    ss = predict("b200", WAN, "mlperf-wan2.2-t2v-singlestream", 8)
    assert off.feasible and ss.feasible
    assert off.config["replicas"] * off.config["ulysses"] * off.config["cfg"] <= 8
    assert off.metrics["samples_per_s"] == pytest.approx(off.config["replicas"] / off.metrics["latency_s"])
    assert ss.config["ulysses"] * ss.config["cfg"] == 8
    assert ss.metrics["latency_s"] < off.metrics["latency_s"] / 4  # one video over 8 GPUs
    assert off.metrics["samples_per_s"] > ss.metrics["samples_per_s"]  # no communication, 8 at once
    assert off.breakdown["bound"] == "compute"


def test_ulysses_degree_divides_the_heads(wan):
    wl = catalog.load("scenario", "mlperf-wan2.2-t2v-offline").workload
    u, c = diffusion.layouts(wan, wl, 16)
    assert set(u) == {1, 2, 4, 5, 8, 10}
    assert np.all(40 % u == 0) and np.all(u * c <= 16)


# ---- DLRMv3 ------------------------------------------------------------------------------------


def test_hstu_attention_pairs_and_truncation(dlrm):
    wl = catalog.load("scenario", "mlperf-dlrm-v3-offline").workload
    s = recsys.sequence_shape(dlrm, wl)
    n = 6715 + 1
    assert s.attention_pairs == n * (n + 1) / 2 + 2048 * (n + 1)
    long = wl.model_copy(update={"history_tokens": 50_000})
    assert recsys.sequence_shape(dlrm, long).tokens == 16384  # truncated to max_seq_len


def test_hstu_silu_attention_pays_an_exp_and_a_reciprocal_per_score(dlrm, b200):
    # HSTU's SiLU(q·k) takes e^-x and 1/(1+e^-x) on the SFU for every score element and head;
    # with them the layer's attention is MMA + 2 SFU results per pair at the unit's rate
    wl = catalog.load("scenario", "mlperf-dlrm-v3-offline").workload
    s = recsys.sequence_shape(dlrm, wl)
    m, B = dlrm.hstu, 64.0
    t = float(recsys.batch_cost(dlrm, wl, b200, B, 8).by_kind["attention"])
    pairs = B * s.attention_pairs * m.n_heads
    mma = pairs * 2.0 * (m.qk_dim + m.linear_dim) / (0.75 * b200.compute.flop_rate("fp16"))
    sfu = pairs * 2.0 / b200.compute.exp_rate
    assert t == pytest.approx(m.n_layers * (mma + sfu), rel=1e-6)
    assert recsys.SILU_SFU_OPS == 2.0


def test_hstu_layer_params_by_hand(dlrm):
    # uvqk: 512 x (2·128 + 2·128) x 4 heads; output: 3·128·4 x 512
    assert dlrm.hstu.params_per_layer == 512 * 512 * 4 + 1536 * 512


def test_embedding_table_needs_sharding(dlrm):
    off = predict("h200-sxm", DLRM, "mlperf-dlrm-v3-offline", 1)
    assert not off.feasible and "do not fit" in off.reason
    assert predict("b200", DLRM, "mlperf-dlrm-v3-offline", 8).feasible  # 1 TB over 8 x 180 GiB


def test_server_meets_its_limit_and_stays_below_offline():
    off = predict("b200", DLRM, "mlperf-dlrm-v3-offline", 8)
    srv = predict("b200", DLRM, "mlperf-dlrm-v3-server", 8)
    assert srv.feasible and srv.metrics["latency_s"] <= 0.080
    assert srv.metrics["samples_per_s"] < off.metrics["samples_per_s"]
    assert srv.breakdown["by_kind_s"]["attention"] > srv.breakdown["by_kind_s"]["memory"]


def test_tighter_latency_limit_lowers_server_throughput(tmp_path):
    text = (REPO / "scenarios" / "mlperf-dlrm-v3-server.yaml").read_text()
    tight = tmp_path / "tight.yaml"
    tight.write_text(text.replace("latency_ms: 80", "latency_ms: 30"))
    base = predict("b200", DLRM, "mlperf-dlrm-v3-server", 8).metrics["samples_per_s"]
    t = predict("b200", DLRM, str(tight), 8)
    assert t.feasible and t.metrics["latency_s"] <= 0.030 and t.metrics["samples_per_s"] < base


def test_server_p99_grows_with_service():
    s = np.array([0.01, 0.02])
    assert np.all(np.diff(recsys.server_p99(s, 1.2 * s)) > 0)


# ---- Qwen3-VL vision encoder --------------------------------------------------------------------


def test_vision_attention_is_quadratic_and_linear_is_linear_in_patches():
    m = catalog.load("model", "qwen3-vl-235b-a22b")
    fmt, lay = Formats("fp8", "fp8", "fp8"), Layout()
    one = {op.name: op for op in vision_ops(m, Shape(prefill_seqs=2.0, prefill_patches=1000.0), lay, fmt)}
    two = {op.name: op for op in vision_ops(m, Shape(prefill_seqs=2.0, prefill_patches=2000.0), lay, fmt)}
    assert two["vision_attention"].flops == pytest.approx(4 * one["vision_attention"].flops)
    assert two["vision_encoder"].flops == pytest.approx(2 * one["vision_encoder"].flops)
    # 27 blocks x (4h² + 2hI) on every patch, merger MLPs on a quarter of them
    v = m.vision_encoder
    blocks = 27 * (4 * 1152**2 + 2 * 1152 * 4304)
    assert one["vision_encoder"].flops == pytest.approx(2 * 2000 * (blocks + (v.params_b * 1e9 - blocks) / 4))


# ---- CLI and validation ------------------------------------------------------------------------


@pytest.mark.parametrize("model, scenario", [(WAN, "mlperf-wan2.2-t2v-offline"), (DLRM, "mlperf-dlrm-v3-offline"),
                                             ("qwen3-vl-235b-a22b", "mlperf-qwen3-vl-235b-a22b-offline")])
def test_run_prints_samples_per_s_with_breakdown(runner, model, scenario):
    r = runner.invoke(app, ["run", "-H", "b200", "-m", model, "-s", scenario, "-n", "8", "--format", "json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["samples_per_s"] > 0 and d["breakdown"]["by_kind_s"]


def test_run_table_and_bad_input(runner):
    r = runner.invoke(app, ["run", "-H", "b200", "-m", DLRM, "-s", "mlperf-dlrm-v3-server", "-n", "8"])
    assert r.exit_code == 0 and "samples/s" in r.stdout
    assert runner.invoke(app, ["run", "-H", "b200", "-m", DLRM, "-s", "mlperf-dlrm-v3-offline", "--tp", "2"]).exit_code == 2
    assert runner.invoke(app, ["run", "-H", "b200", "-m", DLRM, "-s", "mlperf-wan2.2-t2v-offline"]).exit_code == 2
    assert runner.invoke(app, ["run", "-H", "b200", "-m", "llama3.1-8b", "-s", "mlperf-dlrm-v3-offline"]).exit_code == 2
    assert runner.invoke(app, ["run", "-H", "h200-sxm", "-m", DLRM, "-s", "mlperf-dlrm-v3-offline", "-n", "1"]).exit_code == 1


def test_bad_profile_field_is_a_spec_error(runner, tmp_path):
    text = (REPO / "model_profiles" / "dlrm-v3.yaml").read_text().replace("n_heads: 4", "n_heads: -4")
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    r = runner.invoke(app, ["run", "-H", "b200", "-m", str(bad), "-s", "mlperf-dlrm-v3-offline", "-n", "8"])
    assert r.exit_code == 2 and "hstu.n_heads" in r.output


def test_validate_reports_median_error_per_benchmark(runner):
    r = runner.invoke(app, ["validate", "--data", str(REPO / "data" / "mlperf_non_llm_results.csv"), "--format", "json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert set(d["by_benchmark"]) == {WAN, DLRM, "qwen3-vl-235b-a22b"}
    assert d["failed_rows"] == 0 and d["rows"] == len(d["per_row"])
    for row in d["per_row"]:
        assert row["ape"] == pytest.approx(abs(row["predicted"] - row["published"]) / row["published"] * 100)


def test_validate_rejects_unknown_metric(runner, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("version,hardware,model,scenario,accelerators,metric,value\nv6.0,b200,dlrm-v3,offline,8,tokens,5\n")
    r = runner.invoke(app, ["validate", "--data", str(bad)])
    assert r.exit_code == 2 and "metric" in r.output


def test_summary_median_is_per_benchmark():
    rows = [MetricRow("v6.0", "b200", "a", "offline", 8, "samples_per_s", 10.0, "x", predicted=11.0),
            MetricRow("v6.0", "b200", "a", "offline", 8, "samples_per_s", 10.0, "x", predicted=13.0),
            MetricRow("v6.0", "b200", "b", "server", 8, "latency_s", 2.0, "y", predicted=1.0)]
    s = summarize(rows)
    assert s["by_benchmark"]["a"]["median_ape"] == pytest.approx(20.0)
    assert s["by_benchmark"]["b"]["median_ape"] == pytest.approx(50.0)


def test_bundled_rows_load_with_their_metric():
    rows = load_metric_rows(REPO / "data" / "mlperf_non_llm_results.csv")
    assert {r.metric for r in rows} == {"samples_per_s", "latency_s"}
    assert all(r.metric == "latency_s" for r in rows if r.scenario == "singlestream")


def test_video_rows_run_at_their_declared_16_or_8_bit_precision():
    # Krai's H200 run declares bfloat16 (KISS-V); the NVIDIA-recipe rows declare "fp32", the
    # checkpoint's storage type, and run the scenario's Transformer Engine FP8
    from infersim.workloads.validate import declared_precision, predict_row
    rows = load_metric_rows(REPO / "data" / "mlperf_non_llm_results.csv")
    wan_rows = [r for r in rows if r.model == WAN]
    krai = [r for r in wan_rows if r.columns["submitter"] == "Krai"]
    assert krai and {declared_precision(r) for r in krai} == {"bf16"}
    assert {declared_precision(r) for r in wan_rows if r.columns["submitter"] != "Krai"} == {None}
    r = next(r for r in krai if r.scenario == "offline")
    predict_row(r)
    bf16 = predict("h200-sxm", WAN, "mlperf-wan2.2-t2v-offline", 8, precision="bf16").metrics["samples_per_s"]
    fp8 = predict("h200-sxm", WAN, "mlperf-wan2.2-t2v-offline", 8).metrics["samples_per_s"]
    assert r.predicted == pytest.approx(bf16, rel=1e-12)
    assert fp8 > 1.3 * bf16  # twice the tensor rate on the GEMMs and the attention MMAs


def test_precision_override_is_checked():
    with pytest.raises(Exception, match="text-to-video"):
        predict("b200", DLRM, "mlperf-dlrm-v3-offline", 8, precision="bf16")
    with pytest.raises(Exception, match="unknown precision"):
        predict("b200", WAN, "mlperf-wan2.2-t2v-offline", 8, precision="fp12")


@pytest.mark.parametrize("argv", [["pareto", "-H", "b200", "-s", "mlperf-dlrm-v3-offline"],
                                  ["ablate", "-H", "b200", "-s", "mlperf-wan2.2-t2v-offline"],
                                  ["pareto", "-H", "b200", "-m", DLRM, "-s", "mlperf-llama2-70b-offline"]])
def test_llm_only_commands_reject_non_llm_workloads(runner, argv):
    r = runner.invoke(app, argv)
    assert r.exit_code == 2 and "non-LLM" in r.output
