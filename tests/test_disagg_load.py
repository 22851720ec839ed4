"""A disaggregated deployment at a given load (infersim.disagg_load): Little's law on the decode
pool, agreement with the capacity search at its own rate, monotone latencies, saturation, the CLI's
``run --qps`` on a disaggregated point and ``validate --at-load`` on the runs that were disaggregated
(their own pools with ``--run-engine``)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from infersim import api, disagg_load
from infersim.disagg_eval import prefill_options
from infersim.run_settings import run_disagg
from infersim.serving import WorkloadStats


@pytest.fixture(scope="module")
def gb300_llama():
    """NVIDIA's v6.0 GB300 x72 llama2-70b Server, disaggregation forced (the capacity-best split)."""
    p = api.predict("gb300-nvl72", "llama2-70b", "mlperf-llama2-70b-server", 72, round="v6.0", enable=["disagg"])
    assert p.feasible and p.config["disaggregated"]
    stats = WorkloadStats.from_workload(p.inputs.scenario.workload, p.inputs.model)
    return p, stats


def _at(p, stats, qps):
    dec, d, pre, n_p = disagg_load.deployment(p.config)
    return disagg_load.operating_point(p.plan, dec, d, pre, n_p, stats, p.inputs.scenario, qps, p.config["max_batch"],
                                       p.accelerators, inside=p.config["kv_transfer_tier"] == "scale-up")


def test_decode_pool_obeys_littles_law(gb300_llama):
    """Each decode worker holds B sequences with B·L/(OSL·t_d(B)) = λ/D: its served rate at the
    reported occupancy and iteration time is the offered rate (1 %)."""
    p, stats = gb300_llama
    lam = 0.5 * p.metrics["requests_per_s"]
    ok, why, m = _at(p, stats, lam)
    assert ok and why == ""
    served = m["occupancy_per_instance"] * p.plan.serving.tokens_per_step / (stats.osl_mean * m["iteration_s"])
    assert served == pytest.approx(lam / p.config["decode_workers"], rel=0.01)
    assert m["occupancy"] == pytest.approx(m["occupancy_per_instance"] * p.config["decode_workers"])
    # the prefill pool: P workers of the prefill layout's full-chunk rate μ
    lay = {k: np.array([p.config["prefill_layout"][k]]) for k in ("tp", "pp", "ep", "dp")}
    pool, fits = prefill_options(p.plan, stats, lay, 72, True)
    assert fits[0] and m["prefill_utilization"] == pytest.approx(lam / (p.config["prefill_workers"] * pool.mu[0]))


def test_at_the_capacity_rate_the_limits_hold_as_the_search_priced_them(gb300_llama):
    """At the search's own capacity rate the pools meet every limit, and neither latency exceeds what
    the search reported there (it prices the decode step at its grid batch, at or above the occupancy
    the offered rate needs)."""
    p, stats = gb300_llama
    ok, why, m = _at(p, stats, p.metrics["requests_per_s"])
    assert ok, why
    assert m["ttft_s"] <= p.metrics["ttft_s"] * (1 + 1e-9)
    assert m["tpot_s"] <= p.metrics["tpot_s"] * (1 + 1e-9)
    assert m["occupancy_per_instance"] <= p.config["batch"] * (1 + 1e-9)
    # the prefill pool's rate set the capacity here, close to full
    assert 0.9 < m["prefill_utilization"] < 1.0


def test_latencies_grow_with_load_and_a_pool_saturates(gb300_llama):
    p, stats = gb300_llama
    cap = p.metrics["requests_per_s"]
    ms = [_at(p, stats, f * cap)[2] for f in (0.2, 0.5, 0.8, 0.95)]
    for key in ("ttft_s", "ttft_mean_s", "tpot_s", "tpot_mean_s", "occupancy"):
        vals = [m[key] for m in ms]
        assert all(b > a for a, b in zip(vals, vals[1:])), (key, vals)
    for m in ms:
        assert m["ttft_p50_s"] <= m["ttft_mean_s"] <= m["ttft_s"]
        assert m["tpot_p50_s"] <= m["tpot_s"]
    ok, why, m = _at(p, stats, 1.5 * cap)
    assert not ok and why in ("SATURATED", "BATCH_LIMIT") and np.isnan(m["tpot_s"]) and m["completed_tokens_per_s"] == 0


def test_low_load_ttft_is_one_prompt_alone_and_its_first_step(gb300_llama):
    """At a vanishing load nobody queues: TTFT is the prompt's prefill alone, its exposed KV transfer
    and one decode step; that step is the decode worker's at (almost) no occupancy."""
    p, stats = gb300_llama
    ok, _, m = _at(p, stats, 1e-3)
    assert ok and m["prefill_utilization"] < 1e-5
    assert m["occupancy_per_instance"] < 1e-3
    assert m["ttft_p50_s"] == pytest.approx(m["ttft_mean_s"], rel=1e-6)
    assert 0 < m["ttft_mean_s"] - m["iteration_s"] < 0.2


def test_run_qps_on_a_disaggregated_point():
    """``run --qps`` now predicts a disaggregated capacity-best point at the load (it used to drop
    disaggregated variants): the JSON carries the load's figures and the pools."""
    from typer.testing import CliRunner

    from infersim.cli import app

    argv = ["run", "-H", "gb300-nvl72", "-m", "llama2-70b", "-s", "mlperf-llama2-70b-server", "-n", "72",
            "--round", "v6.0", "--enable", "disagg", "--format", "json"]
    cap = json.loads(CliRunner().invoke(app, argv).stdout)
    r = CliRunner().invoke(app, argv + ["--qps", str(0.5 * cap["requests_per_s"])])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["config"]["disaggregated"] and d["config"]["qps"] == pytest.approx(0.5 * cap["requests_per_s"])
    assert d["tokens_per_s"] < cap["tokens_per_s"] and d["tpot_mean_s"] < cap["tpot_mean_s"]
    assert d["occupancy"] > 0 and d["capacity_tokens_per_s"] == pytest.approx(cap["tokens_per_s"])
    over = CliRunner().invoke(app, argv + ["--qps", str(2 * cap["requests_per_s"])])
    assert over.exit_code == 1


_GB300_RUN = {  # NVIDIA v6.0 GB300-NVL72 x72 llama2-70b-99 Server: its config's disaggregated pools
    "serving_mode": "disaggregated (TRT-LLM disagg, llama2_70b_disagg.sh)", "stream_interval": "100 (gen) / 30 (ctx)",
    "disagg_prefill_workers": "28", "disagg_prefill_tp": "1", "disagg_prefill_max_num_tokens": "4608",
    "disagg_decode_workers": "44", "disagg_decode_tp": "1", "disagg_decode_max_batch_size": "2048",
    "disagg_decode_max_num_tokens": "2048", "disagg_decode_cuda_graph_max_bs": "2048"}


def test_run_disagg_reads_the_runs_pools(gb300_llama):
    p, stats = gb300_llama
    plan, dep = run_disagg(p.plan, _GB300_RUN, stats, 72)
    assert (dep["decode_workers"], dep["prefill_workers"]) == (44, 28)
    assert (int(dep["decode"].tp), int(dep["decode"].dp), int(dep["prefill"].tp)) == (1, 1, 1)
    assert plan.engine.max_batch_size == 2048 and plan.engine.stream_interval == 100
    assert plan.serving.prefill_chunk_tokens == 4608 and 0 < dep["max_batch"]
    # ADP over the TP ranks and EP where the run gives them; pools larger than the system: None
    moe = dict(_GB300_RUN, disagg_decode_tp="16", disagg_decode_workers="4", disagg_decode_adp="True",
               disagg_decode_ep="16")
    r1 = api.predict("gb300-nvl72", "deepseek-r1", "mlperf-deepseek-r1-interactive", 72, round="v6.0")
    s1 = WorkloadStats.from_workload(r1.inputs.scenario.workload, r1.inputs.model)
    _, dep = run_disagg(r1.plan, dict(moe, disagg_prefill_workers="4", disagg_prefill_tp="2", disagg_prefill_ep="2",
                                      disagg_prefill_adp="True"), s1, 72)
    assert (int(dep["decode"].tp), int(dep["decode"].ep), int(dep["decode"].dp)) == (16, 16, 16)
    assert int(dep["prefill"].dp) == 2
    assert run_disagg(p.plan, dict(_GB300_RUN, disagg_prefill_workers="40"), stats, 72) is None
    assert run_disagg(p.plan, {k: v for k, v in _GB300_RUN.items() if k != "disagg_decode_tp"}, stats, 72) is None


def test_validate_at_load_prices_disaggregated_runs_on_pools(tmp_path):
    """NVIDIA's v6.0 GB300 x72 llama2-70b Server ran disaggregated: at its load it is priced on
    disaggregated pools, the round preset's capacity-best split by default and its own 28 prefill +
    44 decode workers with ``--run-engine``; it stays out of the aggregated-runs medians."""
    from test_scheduler import _bundled_op_subset, _cli

    f = _bundled_op_subset(tmp_path, lambda r: r["version"] == "v6.0" and r["submitter"] == "NVIDIA"
                           and r["scenario"] == "Server" and r["benchmark"] == "llama2-70b-99"
                           and r["system"].startswith("GB300"), 1)
    code, d = _cli(["validate", "--at-load", "--data", str(f), "--format", "json"])
    assert code == 0, d
    row = d["per_row"][0]
    assert row["disaggregated_run"] and not row["run_layout"] and row["reason"] == ""
    assert row["config"]["decode_workers"] + row["config"]["prefill_workers"] <= 72
    assert 0 < row["prefill_utilization"] < 1 and d["tpot_p50_median_ape_aggregated_runs"] is None
    code, d = _cli(["validate", "--at-load", "--run-engine", "--data", str(f), "--format", "json"])
    assert code == 0, d
    row = d["per_row"][0]
    assert row["run_layout"] and (row["config"]["decode_workers"], row["config"]["prefill_workers"]) == (44, 28)
    assert row["reason"] == "" and row["tpot_p50_ape"] >= 0


def test_validate_at_load_writes_rows_as_csv_and_a_plot(tmp_path):
    """``validate --at-load --format csv`` is one line per row (measured and predicted latencies,
    errors, or the reason), and ``--plot`` draws predicted against measured (it was ignored before)."""
    import csv

    from test_scheduler import _bundled_op_subset, _cli

    f = _bundled_op_subset(tmp_path, lambda r: r["version"] == "v6.0" and r["benchmark"] == "llama2-70b-99"
                           and r["system"].startswith(("GB300", "B300")), 6)
    png, out = tmp_path / "at_load.png", tmp_path / "rows.csv"
    code, text = _cli(["validate", "--at-load", "--data", str(f), "--format", "csv", "--out", str(out),
                       "--plot", str(png)])
    assert code == 0, text
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == len(list(csv.DictReader(f.open()))) >= 4 and {"measured_tpot_p50_ms", "predicted_tpot_p50_ms", "ttft_p99_error_s"} <= set(rows[0])
    done = [r for r in rows if not r["reason"]]
    assert done and all(float(r["predicted_tpot_p50_ms"]) > 0 for r in done)
    assert all(r["predicted_tpot_p50_ms"] == "" for r in rows if r["reason"])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_run_qps_table_shows_the_load_beside_the_capacity_point():
    """At ``--qps`` the table's headline is the load's; an "at this load" table gives the occupancy,
    iteration time and share of capacity, and the batch and step rows say they are the capacity's."""
    from typer.testing import CliRunner

    from infersim.cli import app

    r = CliRunner().invoke(app, ["run", "-H", "b200", "-s", "mlperf-llama2-70b-server", "-n", "8", "--round", "v6.0",
                                 "--qps", "100"])
    assert r.exit_code == 0, r.output
    assert "at this load" in r.output and "occupancy (system / per instance)" in r.output
    assert "batch (sequences per instance) at capacity" in r.output and "decode step at capacity" in r.output
    plain = CliRunner().invoke(app, ["run", "-H", "b200", "-s", "mlperf-llama2-70b-server", "-n", "8", "--round", "v6.0"])
    assert plain.exit_code == 0 and "at this load" not in plain.output and "at capacity" not in plain.output
