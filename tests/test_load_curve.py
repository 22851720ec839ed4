"""``infersim curve`` / ``infersim.load_curve`` (``curve.curve``): the capacity-best configuration run at a list of loads.
Each point is what ``run --qps`` predicts at that load; the default loads run up to the capacity,
where the limits still hold; past it the curve names the limit that breaks."""

from __future__ import annotations

import csv
import json

import pytest

from infersim import api
from infersim import curve as load_curve
from infersim.cli import app
from infersim.errors import SpecError

SYSTEM = ("b200", "llama3.1-70b", "chat-1k-1k", 8)


@pytest.fixture(scope="module")
def default_curve():
    return load_curve.curve(*SYSTEM, points=5)


def test_each_point_is_run_at_that_load(default_curve):
    for row in default_curve.rows[::2]:
        at = api.predict(*SYSTEM, qps=row["requests_per_s"]).to_dict()
        for key in ("tokens_per_s", "occupancy", "iteration_s", "ttft_p50_s", "ttft_s", "tpot_p50_s", "tpot_s"):
            assert row[key] == pytest.approx(at[key], rel=1e-12), key
        assert row["limit"] == at["limit"] == ""


def test_default_loads_run_up_to_the_capacity_within_the_limits(default_curve):
    cap = api.predict(*SYSTEM)
    rows = default_curve.rows
    assert [r["share_of_capacity"] for r in rows] == pytest.approx([0.2, 0.4, 0.6, 0.8, 1.0])
    assert rows[-1]["requests_per_s"] == pytest.approx(cap.metrics["requests_per_s"], rel=1e-12)
    assert all(r["meets_limits"] for r in rows)
    for key in ("ttft_s", "tpot_s", "occupancy", "iteration_s"):  # more load, longer waits and steps
        values = [r[key] for r in rows]
        assert values == sorted(values), key
    assert rows[-1]["tpot_s"] <= 0.050 * (1 + 1e-9)


def test_past_capacity_the_curve_names_the_broken_limit():
    c = load_curve.curve(*SYSTEM, qps=[50.0, 200.0])
    over, stalled = c.rows
    assert not over["meets_limits"] and over["limit"] == "SLO_TPOT" and over["tpot_s"] > 0.050
    assert not stalled["meets_limits"] and stalled["limit"] == "SATURATED"
    assert stalled["ttft_s"] is None and stalled["tokens_per_s"] is None  # no steady state to report


def test_the_limits_in_force_shape_the_curve():
    c = load_curve.curve(*SYSTEM, points=2, slo={"tpot_ms": 30.0})
    assert c.to_dict()["limits"]["tpot_ms"] == 30.0
    assert c.rows[-1]["tpot_s"] <= 0.030 * (1 + 1e-9)
    assert c.to_dict()["capacity_requests_per_s"] < api.predict(*SYSTEM).metrics["requests_per_s"]


@pytest.mark.parametrize("kwargs, words", [
    ({"qps": [0.0]}, "--qps values must be in (0, 1e9]"),
    ({"qps": [float("nan")]}, "--qps values must be in"),
    ({"points": 0}, "--points must be in [1, 200]"),
    ({"qps": [1.0] * 201}, "--qps takes at most 200 loads"),
])
def test_bad_loads_are_named(kwargs, words):
    with pytest.raises(SpecError) as err:
        load_curve.curve(*SYSTEM, **kwargs)
    assert words in str(err.value)


def test_an_offline_scenario_has_no_load_curve(runner):
    r = runner.invoke(app, ["curve", "-H", "b200", "-m", "llama3.1-70b", "-s", "batch-1k-1k", "-n", "8"])
    assert r.exit_code == 2 and "offline" in r.output


def test_cli_outputs_and_the_output_guard(runner, tmp_path):
    argv = ["curve", "-H", "b200", "-m", "llama3.1-70b", "-s", "chat-1k-1k", "-n", "8", "--points", "3"]
    r = runner.invoke(app, [*argv, "--format", "json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert len(d["points"]) == 3 and d["limits"]["tpot_ms"] == 50.0 and d["config"]["tp"] >= 1
    out, png = tmp_path / "curve.csv", tmp_path / "curve.png"
    r = runner.invoke(app, [*argv, "--out", str(out), "--plot", str(png)])
    assert r.exit_code == 0, r.output
    assert "load curve" in r.stdout and "TPOT p99 ms" in r.stdout
    assert len(list(csv.DictReader(open(out)))) == 3
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    mine = tmp_path / "notes.csv"
    mine.write_text("mine\n")
    r = runner.invoke(app, [*argv, "--out", str(mine)])
    assert r.exit_code == 2 and mine.read_text() == "mine\n"  # a user's file is never overwritten unasked
    bad = runner.invoke(app, [*argv, "--qps", "5,x"])
    assert bad.exit_code == 2


def test_run_at_a_load_names_the_limit_it_breaks(runner):
    ok = json.loads(runner.invoke(app, ["run", "-H", "b200", "-m", "llama3.1-70b", "-s", "chat-1k-1k", "-n", "8",
                                        "--qps", "10", "--format", "json"]).stdout)
    assert ok["limit"] == ""
    r = runner.invoke(app, ["run", "-H", "b200", "-m", "llama3.1-70b", "-s", "chat-1k-1k", "-n", "8", "--qps", "50",
                            "--format", "json"])
    assert r.exit_code == 1 and json.loads(r.stdout)["limit"] == "SLO_TPOT"


@pytest.mark.parametrize("system", [("h200-sxm", "llama3.1-70b", "chat-1k-1k", 8), SYSTEM,
                                    ("h200-sxm", None, "mlperf-llama2-70b-server", 8)],
                         ids=["h200-chat", "b200-chat", "h200-llama2-server"])
def test_the_capacity_rate_gives_back_the_capacity_point(system):
    """``scheduler.at_rate`` inverts the rate to the occupancy exactly (regula falsi inside the axis
    cell), so the capacity's own rate gives back its placed batch: the same latencies, within the
    limits (the interpolation alone had put one of these 0.15 % over its TPOT limit)."""
    cap = api.predict(*system)
    at = api.at_load(cap, cap.metrics["requests_per_s"])
    assert at.feasible, at.reason
    for key in ("ttft_s", "tpot_s"):
        assert at.metrics[key] == pytest.approx(cap.metrics[key], rel=1e-6), key


def test_the_command_runs_in_a_fresh_interpreter(tmp_path):
    """In a new process (nothing imported before the command): the module behind ``infersim curve``
    and the public ``infersim.load_curve`` must not shadow each other."""
    import os
    import subprocess
    import sys

    from conftest import REPO

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, "-m", "infersim", "curve", "-H", "b200", "-m", "llama3.1-70b", "-s",
                        "chat-1k-1k", "-n", "8", "--points", "2", "--format", "json"], capture_output=True, text=True,
                       timeout=120, cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr
    assert len(json.loads(r.stdout)["points"]) == 2
    code = "import infersim; print(len(infersim.load_curve('b200', 'llama3.1-70b', 'chat-1k-1k', 8, points=2).rows))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
    assert r.returncode == 0 and r.stdout.strip() == "2", r.stderr
