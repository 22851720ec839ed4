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


def test_wan_forward_attention_time_by_hand(wan, b200):
    wl = catalog.load("scenario", "mlperf-wan2.2-t2v-offline").workload
    shape = diffusion.video_shape(wan, wl)
    fwd = diffusion.dit_forward(wan, shape, b200, "fp8", 1.0)
    S, h, L, T = shape.tokens, 5120, 40, 512
    eff = b200.efficiency.attention_fraction
    rate = b200.compute.flop_rate("fp8")
    # self-attention 4·S²·h and cross-attention 4·S·T·h per block, both compute bound at this size
    expected = L * (4.0 * S * S * h + 4.0 * S * T * h) / (eff * rate)
    assert float(fwd.by_kind["attention"]) == pytest.approx(expected, rel=1e-6)
    assert float(fwd.by_kind["comm"]) == 0.0  # one rank: no Ulysses all-to-all


def test_wan_attention_takes_the_exponential_roof_when_it_binds(wan, b200):
    # one softmax exp per score and head: S·S·40 heads (self) + S·T·40 (cross) per block; on B200 the
    # exps at exp_fraction of 4.39e12/s stay below the FP8 tensor time at the fitted attention_fraction,
    # and a profile with a 10x slower unit is exp-bound and takes exactly the exps' time
    wl = catalog.load("scenario", "mlperf-wan2.2-t2v-offline").workload
    shape = diffusion.video_shape(wan, wl)
    S, T, L, heads = shape.tokens, 512, 40, wan.transformer.n_heads
    exps = L * (S * S * heads + S * T * heads)
    eff = b200.efficiency
    t_exp = exps / (eff.exp_fraction * b200.compute.exp_rate)
    tensor = float(diffusion.dit_forward(wan, shape, b200, "fp8", 1.0).by_kind["attention"])
    assert t_exp < tensor
    slow = b200.model_copy(update={"compute": b200.compute.model_copy(
        update={"exp_rate_tera_per_s": b200.compute.exp_rate_tera_per_s / 10})})
    assert float(diffusion.dit_forward(wan, shape, slow, "fp8", 1.0).by_kind["attention"]) == pytest.approx(
        10 * t_exp, rel=1e-6)


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


@pytest.mark.parametrize("argv", [["pareto", "-H", "b200", "-s", "mlperf-dlrm-v3-offline"],
                                  ["ablate", "-H", "b200", "-s", "mlperf-wan2.2-t2v-offline"],
                                  ["pareto", "-H", "b200", "-m", DLRM, "-s", "mlperf-llama2-70b-offline"]])
def test_llm_only_commands_reject_non_llm_workloads(runner, argv):
    r = runner.invoke(app, argv)
    assert r.exit_code == 2 and "non-LLM" in r.output
