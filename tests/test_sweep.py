"""Sweeps (named axes → streamed rows) and capacity planning."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from infersim import api
from infersim.cli import app
from infersim.errors import Reason, SpecError
from infersim.sweep import BatchRange, SweepSpec, run
from infersim.sweep.cells import COLUMNS

SMALL = dict(hardware=["h100-sxm", "h200-sxm"], model=["llama3.1-8b"], scenario=["mlperf-llama3.1-8b-server"],
             accelerators=[2], tp=[1, 2], batch=[1.0, 16.0, 256.0])


def test_every_point_has_every_contract_column_and_the_same_numbers_as_the_evaluation():
    summary, table = run(SweepSpec(**SMALL), workers=1, collect=True)
    assert summary.cells == 2 and table.num_rows == summary.rows == summary.points
    assert table.schema.names == list(COLUMNS)
    rows = table.to_pylist()
    for r in rows[:6]:
        alone = api.predict(r["hardware"], "llama3.1-8b", "mlperf-llama3.1-8b-server", 2, tp=r["tp"], pp=r["pp"],
                            batch=r["batch"], enable=r["optimizations"].split(",") if r["optimizations"] else [],
                            disable=[k for k in ("disagg", "kv_routing", "mtp") if k not in r["optimizations"]])
        assert alone.feasible == r["feasible"]
        if r["feasible"]:
            assert alone.metrics["tokens_per_s"] == pytest.approx(r["tokens_per_s"], rel=1e-9)
            assert alone.metrics["ttft_s"] == pytest.approx(r["ttft_s"], rel=1e-9)
        else:
            assert Reason(r["reason"]) != Reason.NONE


def test_keep_best_is_the_prediction_and_pareto_is_non_dominated():
    spec = SweepSpec(**{**SMALL, "tp": None, "batch": None})
    _, best = run(spec.model_copy(update={"keep": "best"}), workers=1, collect=True)
    for r in best.to_pylist():
        pred = api.predict(r["hardware"], "llama3.1-8b", "mlperf-llama3.1-8b-server", 2)
        assert r["tokens_per_s_per_accelerator"] == pytest.approx(pred.metrics["tokens_per_s_per_accelerator"], rel=1e-9)
    _, front = run(spec.model_copy(update={"keep": "pareto"}), workers=1, collect=True)
    cols = front.to_pydict()
    for hw in set(cols["hardware"]):
        pts = [(u, a) for h, u, a in zip(cols["hardware"], cols["tokens_per_s_per_user"],
                                         cols["tokens_per_s_per_accelerator"]) if h == hw]
        assert len(pts) >= 2
        for u, a in pts:  # nobody beats a frontier point on both axes
            assert not any(u2 > u and a2 > a for u2, a2 in pts)


def test_streams_to_parquet_and_csv_atomically(tmp_path):
    spec = SweepSpec(**SMALL)
    s1, _ = run(spec, tmp_path / "a.parquet", workers=2)
    s2, _ = run(spec, tmp_path / "a.csv", workers=1)
    t = pq.read_table(tmp_path / "a.parquet")
    assert t.num_rows == s1.rows == s2.rows
    assert (tmp_path / "a.csv").read_text().splitlines()[0].replace('"', "").split(",") == list(COLUMNS)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.csv", "a.parquet"]  # no temporaries left
    with pytest.raises(SpecError):
        run(spec, tmp_path / "a.txt", workers=1)


def test_a_local_dask_cluster_gives_identical_rows():
    distributed = pytest.importorskip("distributed")
    spec = SweepSpec(**SMALL)
    _, local = run(spec, workers=1, collect=True)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as cluster:
        with distributed.Client(cluster) as client:
            _, remote = run(spec, scheduler=client, collect=True)
    assert remote.equals(local)


def test_batch_range_and_bad_axes():
    assert BatchRange(start=1, stop=8, num=4, spacing="linear").values() == (1.0, 3.0, 6.0, 8.0)
    with pytest.raises(Exception):
        SweepSpec(hardware=["b200"], scenario=["chat-1k-1k"], tp=[0])


def test_sweep_cli_writes_parquet_and_reports(runner, tmp_path):
    out = tmp_path / "s.parquet"
    r = runner.invoke(app, ["sweep", "-H", "h100-sxm", "-m", "llama3.1-8b", "-s", "mlperf-llama3.1-8b-offline", "-n",
                            "1,2", "--batch", "1:64:4", "--keep", "best", "--out", str(out), "--json", "--workers", "1"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["cells"] == 2 and d["rows"] == 2 and pq.read_table(out).num_rows == 2
    bad = runner.invoke(app, ["sweep", "-H", "h100-sxm", "-s", "chat-1k-1k", "--tp", "one"])
    assert bad.exit_code == 2 and "--tp" in bad.output


def test_plan_cheapest_first_with_cost_and_layout(runner):
    r = runner.invoke(app, ["plan", "--model", "llama3.1-70b", "--scenario", "chat-1k-1k", "--target-tokens-per-s",
                            "50000", "--hardware", "h200-sxm,b200,mi325x", "--format", "json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    assert [x["hardware"] for x in rows] and all(x["feasible"] for x in rows)
    costs = [x["usd_per_month"] for x in rows]
    assert costs == sorted(costs)
    for x in rows:
        assert x["capacity_tokens_per_s"] >= 50000 and x["headroom"] >= 0
        assert {"tp", "pp", "ep", "dp", "replicas"} <= set(x["layout"]) and x["usd_per_million_tokens"] > 0
        # one accelerator fewer does not meet the target (the count is the fewest)
        fewer = api.predict(x["hardware"], "llama3.1-70b", "chat-1k-1k", x["accelerators"] - 1)
        assert not fewer.feasible or fewer.metrics["tokens_per_s"] < 50000
        # the fleet at the target load itself: its limits hold, with latencies at or below capacity's
        at = x["at_target"]
        assert at["meets_limits"] and at["limit"] == "" and at["occupancy"] > 0
        assert at["ttft_s"] <= x["ttft_s"] * (1 + 1e-9) and at["tpot_s"] <= x["tpot_s"] * (1 + 1e-9)
        assert at["ttft_p50_s"] <= at["ttft_s"] and at["tpot_p50_s"] <= at["tpot_s"]
    stats = api.predict("b200", "llama3.1-70b", "chat-1k-1k", 8).result.stats
    assert rows[0]["at_target"]["requests_per_s"] == pytest.approx(50000 / stats.osl_mean)
    table = runner.invoke(app, ["plan", "--model", "llama3.1-70b", "--scenario", "chat-1k-1k", "--target-tokens-per-s",
                                "50000", "--hardware", "b200"])
    assert table.exit_code == 0 and "at target" in table.output


def test_plan_offline_has_no_at_target_figures(runner):
    r = runner.invoke(app, ["plan", "-m", "llama3.1-8b", "-s", "mlperf-llama3.1-8b-offline", "--target-tokens-per-s",
                            "20000", "-H", "h100-sxm", "--format", "json"])
    assert r.exit_code == 0, r.output
    row = json.loads(r.stdout)[0]
    assert row["feasible"] and "at_target" not in row


def test_plan_bad_target_is_exit_2(runner):
    r = runner.invoke(app, ["plan", "-s", "chat-1k-1k", "-m", "llama3.1-8b", "-H", "b200", "--target-tokens-per-s", "-5"])
    assert r.exit_code == 2


def test_fit_only_evaluation_equals_the_full_grid_where_anything_fits():
    """Sweeps run the serving model only on batch values where some layout fits in memory; those
    points are bit-identical to the full evaluation, the rest keep the cheap checks' reasons."""
    from infersim.query import Query

    q = Query.build("h100-sxm", "llama3.1-70b", "chat-1k-1k", 8, batch=tuple(float(b) for b in np.unique(np.round(np.geomspace(1, 60000, 90)))))
    full, cut = api.evaluate(q), api.evaluate(q, fit_only=True)
    assert len(full) == len(cut) and any(r.unfit is not None for r in cut)
    for f, c in zip(full, cut):
        if c.unfit is None:
            continue
        cols = c.unfit.columns
        assert len(c.unfit.batch) == f.ok.shape[1] and 0 < len(cols) < f.ok.shape[1]
        np.testing.assert_array_equal(c.batch, f.batch[cols])
        np.testing.assert_array_equal(c.ok, f.ok[:, cols])
        np.testing.assert_array_equal(np.broadcast_to(c.reason, c.ok.shape), np.broadcast_to(f.reason, f.ok.shape)[:, cols])
        for name, values in f.metrics.items():
            np.testing.assert_array_equal(c.metrics[name], values[:, cols], err_msg=name)
        dropped = np.setdiff1d(np.arange(f.ok.shape[1]), cols)
        assert not f.ok_capacity[:, dropped].any()  # nothing fits there
        np.testing.assert_array_equal(np.broadcast_to(c.unfit.reason, f.ok.shape)[:, dropped],
                                      np.broadcast_to(f.reason, f.ok.shape)[:, dropped])
        assert f.best_index() == (None if c.best_index() is None else (c.best_index()[0], int(cols[c.best_index()[1]])))


def test_optimization_parameters_as_an_axis(runner, tmp_path):
    """``--set KIND.PARAM=V1,V2`` (or ``params:`` in a sweep file) makes one cell per value, labelled
    in the ``params`` column; each cell's best equals ``run`` with that parameter."""
    import csv

    out = tmp_path / "pd.csv"
    r = runner.invoke(app, ["sweep", "-H", "gb300-nvl72", "-s", "mlperf-llama2-70b-server", "-n", "72", "--round", "v6.0",
                            "--optimizations", "disagg", "--set", "disagg.decode_workers=40,44", "--tp", "1",
                            "--keep", "best", "--out", str(out), "--workers", "1", "--json"])
    assert r.exit_code == 0, r.output
    rows = list(csv.DictReader(out.open()))
    assert [x["params"] for x in rows] == ["disagg.decode_workers=40", "disagg.decode_workers=44"]
    for x, d in zip(rows, (40, 44)):
        alone = api.predict("gb300-nvl72", None, "mlperf-llama2-70b-server", 72, round="v6.0", enable=["disagg"], tp=1,
                            params={"disagg": {"decode_workers": d}})
        assert alone.config["decode_workers"] == d
        assert float(x["tokens_per_s"]) == pytest.approx(alone.metrics["tokens_per_s"], rel=1e-9)
    assert float(rows[1]["tokens_per_s"]) > float(rows[0]["tokens_per_s"])
    # the same axis from a sweep file, crossed with a second parameter
    spec = SweepSpec(hardware=["b200"], scenario=["mlperf-deepseek-r1-server"], accelerators=[8],
                     optimizations=[["mtp"]], params={"mtp.depth": [1, 2], "disagg.kv_transfer_exposed": [0.3]})
    cells = spec.cells()
    assert [c.params_label() for c in cells] == ["mtp.depth=1;disagg.kv_transfer_exposed=0.3",
                                                 "mtp.depth=2;disagg.kv_transfer_exposed=0.3"]
    assert cells[1].param_overrides() == {"mtp": {"depth": 2}, "disagg": {"kv_transfer_exposed": 0.3}}


@pytest.mark.parametrize("flag, says", [("mtp.depth=1,x", "valid integer"), ("foo.bar=1", "unknown optimization"),
                                        ("disagg.decode_workers=-1", "greater than or equal to 0"),
                                        ("mtpdepth=1", "KIND.PARAM"), ("disagg.nope=1", "no parameter 'nope'")])
def test_a_bad_parameter_axis_is_exit_2(runner, flag, says):
    r = runner.invoke(app, ["sweep", "-H", "b200", "-s", "mlperf-llama2-70b-server", "-n", "8", "--set", flag])
    assert r.exit_code == 2 and says in r.output


def test_plan_table_falls_back_to_capacity_latencies_without_an_at_target_figure():
    from infersim.cli import _at_target_or_capacity

    row = {"ttft_s": 0.5, "tpot_s": 0.05, "at_target": {"ttft_s": 0.2, "tpot_s": None}}
    assert _at_target_or_capacity(row, "ttft_s") == 0.2 and _at_target_or_capacity(row, "tpot_s") == 0.05
    assert _at_target_or_capacity({"ttft_s": 0.5}, "ttft_s") == 0.5
    assert _at_target_or_capacity({"ttft_s": 0.5, "at_target": {"ttft_s": float("nan")}}, "ttft_s") == 0.5


def test_dispatch_as_an_axis(runner, tmp_path):
    """``--dispatch A,B`` (or ``dispatch:`` in a sweep file) makes one cell per policy, labelled in the
    ``dispatch`` column (the preset's where unset); each cell's best equals ``run --dispatch``."""
    import csv

    out = tmp_path / "d.csv"
    r = runner.invoke(app, ["sweep", "-H", "h100-sxm", "-m", "llama3.1-405b", "-s", "mlperf-llama3.1-405b-server",
                            "-n", "16", "--round", "v5.1", "--tp", "8", "--pp", "1", "--dispatch", "random,round_robin",
                            "--keep", "best", "--out", str(out), "--workers", "1", "--json"])
    assert r.exit_code == 0, r.output
    rows = list(csv.DictReader(out.open()))
    assert [x["dispatch"] for x in rows] == ["random", "round_robin"]
    for x in rows:
        alone = api.predict("h100-sxm", "llama3.1-405b", "mlperf-llama3.1-405b-server", 16, round="v5.1", tp=8, pp=1,
                            dispatch=x["dispatch"])
        assert float(x["tokens_per_s"]) == pytest.approx(alone.metrics["tokens_per_s"], rel=1e-9)
    assert float(rows[1]["tokens_per_s"]) > float(rows[0]["tokens_per_s"])  # two instances dealt in turn
    assert [c.dispatch for c in SweepSpec(**SMALL).cells()] == [None, None]
    _, table = run(SweepSpec(**{**SMALL, "hardware": ["h100-sxm"]}), workers=1, collect=True)
    assert set(table.to_pydict()["dispatch"]) == {"random"}  # unset: the round preset's
    bad = runner.invoke(app, ["sweep", "-H", "b200", "-s", "mlperf-llama2-70b-server", "-n", "8", "--dispatch", "fast"])
    assert bad.exit_code == 2 and "dispatch" in bad.output
