"""Latency limits replaced from the command line and the API (``query.apply_slo``): ``--ttft-ms``,
``--tpot-ms``, ``--e2e-ms``, ``--slo-percentile`` on run, pareto, ablate and plan, and ``ttft_ms`` /
``tpot_ms`` axes in a sweep. An override must give exactly what a scenario file with those limits
gives, and bad values or a scenario without limits are bad input (exit 2)."""

from __future__ import annotations

import csv
import json
import math

import pytest
from ruamel.yaml import YAML

from infersim import api
from infersim.cli import app
from infersim.errors import SpecError
from infersim.specs import catalog

HW, MODEL, SC = "h200-sxm", "llama3.1-8b", "chat-1k-1k"


def _scenario_file(tmp_path, **slo) -> str:
    """The bundled chat scenario written to a file with its ``slo`` fields replaced."""
    data = catalog.load("scenario", SC).model_dump(mode="json", exclude_none=True)
    data["slo"].update(slo)
    path = tmp_path / "chat-limits.yaml"
    with open(path, "w") as f:
        YAML().dump(data, f)
    return str(path)


def _same(a: dict, b: dict) -> None:
    """Two ``Prediction.to_dict()`` outputs equal but for the scenario's name."""
    for k in set(a) | set(b):
        if k != "scenario":
            assert a[k] == b[k], k


@pytest.mark.parametrize("slo", [{"tpot_ms": 20.0}, {"ttft_ms": 120.0, "tpot_ms": 35.0}, {"percentile": 90.0}],
                         ids=["tpot", "ttft+tpot", "percentile"])
def test_an_override_predicts_what_a_scenario_file_with_those_limits_predicts(tmp_path, slo):
    over = api.predict(HW, MODEL, SC, 8, slo=slo).to_dict()
    filed = api.predict(HW, MODEL, _scenario_file(tmp_path, **slo), 8).to_dict()
    _same(over, filed)
    for key, value in slo.items():
        assert over["limits"][key] == value
    assert over != api.predict(HW, MODEL, SC, 8).to_dict()  # the override acted


def test_a_tighter_tpot_limit_costs_throughput_and_is_met():
    loose, tight = (api.predict(HW, MODEL, SC, 8, slo={"tpot_ms": ms}) for ms in (50.0, 20.0))
    assert tight.feasible and loose.feasible
    assert tight.metrics["tpot_s"] <= 0.020 * (1 + 1e-9)
    assert tight.metrics["tokens_per_s_per_accelerator"] < loose.metrics["tokens_per_s_per_accelerator"]


@pytest.mark.parametrize("slo, words", [
    ({"tpot_ms": -1.0}, "--tpot-ms must be in (0, 1,000,000] ms"),
    ({"ttft_ms": math.nan}, "--ttft-ms must be in"),
    ({"e2e_ms": 0.0}, "--e2e-ms must be in"),
    ({"percentile": 100.0}, "--slo-percentile must be in (0, 100)"),
    ({"tpot_ms": 2e6}, "--tpot-ms must be in"),
    ({"tbt_ms": 5.0}, "unknown latency limit 'tbt_ms'"),
])
def test_bad_limits_are_named(slo, words):
    with pytest.raises(SpecError, match=None) as err:
        api.predict(HW, MODEL, SC, 8, slo=slo)
    assert words in str(err.value)


def test_an_offline_scenario_has_no_limits_to_replace():
    with pytest.raises(SpecError) as err:
        api.predict(HW, MODEL, "batch-1k-1k", 8, slo={"ttft_ms": 500.0})
    assert "--ttft-ms" in str(err.value) and "batch-1k-1k" in str(err.value) and "offline" in str(err.value)


def test_run_cli_reports_the_limits_in_force(runner):
    r = runner.invoke(app, ["run", "-H", HW, "-m", MODEL, "-s", SC, "-n", "8", "--tpot-ms", "20", "--format", "json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["limits"] == {"ttft_ms": 1000.0, "tpot_ms": 20.0, "e2e_ms": None, "percentile": 99.0}
    assert d["tpot_s"] <= 0.020 * (1 + 1e-9)
    table = runner.invoke(app, ["run", "-H", HW, "-m", MODEL, "-s", SC, "-n", "8", "--tpot-ms", "20",
                                "--slo-percentile", "90"])
    assert table.exit_code == 0, table.output
    assert "TPOT p90 / mean" in table.stdout and "p90: TTFT ≤ 1,000 ms · TPOT ≤ 20 ms" in table.stdout


@pytest.mark.parametrize("argv, words", [
    (["run", "-H", HW, "-m", MODEL, "-s", SC, "-n", "8", "--tpot-ms", "-3"], "--tpot-ms must be in"),
    (["run", "-H", HW, "-m", MODEL, "-s", "batch-1k-1k", "-n", "8", "--ttft-ms", "500"], "offline"),
    (["pareto", "-H", HW, "-m", MODEL, "-s", SC, "-n", "8", "--slo-percentile", "0"], "--slo-percentile must be in"),
    (["ablate", "-H", HW, "-m", MODEL, "-s", SC, "-n", "8", "--e2e-ms", "-1"], "--e2e-ms must be in"),
    (["plan", "-H", HW, "-m", MODEL, "-s", "batch-1k-1k", "--target-tokens-per-s", "1000", "--tpot-ms", "30"],
     "offline"),
    (["sweep", "-H", HW, "-m", MODEL, "-s", f"{SC},batch-1k-1k", "-n", "8", "--tpot-ms", "20,50"], "offline"),
    (["sweep", "-H", HW, "-m", MODEL, "-s", SC, "-n", "8", "--tpot-ms", "20,-5"], "tpot_ms: values must be in"),
])
def test_bad_limit_flags_exit_2(runner, argv, words):
    r = runner.invoke(app, argv)
    assert r.exit_code == 2, r.output
    assert words in r.output


def test_pareto_and_ablate_search_under_the_replaced_limits(runner):
    r = runner.invoke(app, ["pareto", "-H", HW, "-m", MODEL, "-s", SC, "-n", "8", "--tpot-ms", "20", "--format", "json"])
    assert r.exit_code == 0, r.output
    points = json.loads(r.stdout)
    assert any(p["meets_limits"] for p in points)
    assert all(p["tpot_p99_s"] <= 0.020 * (1 + 1e-9) for p in points if p["meets_limits"])
    assert any(p["tpot_p99_s"] > 0.020 for p in points if not p["meets_limits"])
    a = runner.invoke(app, ["ablate", "-H", HW, "-m", MODEL, "-s", SC, "-n", "8", "--tpot-ms", "20", "--format", "json"])
    assert a.exit_code == 0, a.output
    d = json.loads(a.stdout)
    assert d["limits"]["tpot_ms"] == 20.0
    assert all(row["tpot_s"] <= 0.020 * (1 + 1e-9) for row in d["waterfall"] if row["feasible"])


def test_plan_sizes_the_fleet_for_the_replaced_limits(runner):
    def plan(*extra):
        r = runner.invoke(app, ["plan", "-H", HW, "-m", MODEL, "-s", SC, "--target-tokens-per-s", "100000", "--format",
                                "json", *extra])
        assert r.exit_code == 0, r.output
        return json.loads(r.stdout)[0]
    loose, tight = plan(), plan("--tpot-ms", "20")
    assert tight["limits"]["tpot_ms"] == 20.0 and loose["limits"]["tpot_ms"] == 50.0
    assert tight["accelerators"] >= loose["accelerators"]
    assert tight["capacity_tokens_per_s"] >= 100000
    assert tight["at_target"]["tpot_s"] <= 0.020 * (1 + 1e-9)


def test_sweep_limit_axes_give_run_s_answers(runner, tmp_path):
    out = tmp_path / "limits.csv"
    r = runner.invoke(app, ["sweep", "-H", HW, "-m", MODEL, "-s", SC, "-n", "8", "--tpot-ms", "20,50",
                            "--ttft-ms", "500", "--keep", "best", "--workers", "1", "--out", str(out)])
    assert r.exit_code == 0, r.output
    rows = list(csv.DictReader(open(out)))
    assert [(float(x["ttft_limit_ms"]), float(x["tpot_limit_ms"])) for x in rows] == [(500.0, 20.0), (500.0, 50.0)]
    for x in rows:
        want = api.predict(HW, MODEL, SC, 8, slo={"ttft_ms": 500.0, "tpot_ms": float(x["tpot_limit_ms"])})
        assert float(x["tokens_per_s_per_accelerator"]) == pytest.approx(
            want.metrics["tokens_per_s_per_accelerator"], rel=1e-12)
    offline = tmp_path / "offline.csv"
    r = runner.invoke(app, ["sweep", "-H", HW, "-m", MODEL, "-s", "batch-1k-1k", "-n", "8", "--keep", "best",
                            "--workers", "1", "--out", str(offline)])
    assert r.exit_code == 0, r.output
    row = next(csv.DictReader(open(offline)))
    assert math.isnan(float(row["ttft_limit_ms"])) and math.isnan(float(row["tpot_limit_ms"]))


def test_messages_name_the_scenario_s_percentile(runner):
    r = runner.invoke(app, ["run", "-H", HW, "-m", MODEL, "-s", SC, "-n", "8", "--tpot-ms", "1", "--slo-percentile", "90"])
    assert r.exit_code == 1
    assert "p90 TPOT limit" in r.output and "p90 TPOT" in r.output.split("closest:")[1] and "p99" not in r.output
    at = runner.invoke(app, ["run", "-H", HW, "-m", MODEL, "-s", SC, "-n", "8", "--qps", "500", "--slo-percentile", "90"])
    assert at.exit_code == 1 and "p99" not in at.output
    plain = runner.invoke(app, ["run", "-H", HW, "-m", MODEL, "-s", SC, "-n", "8", "--tpot-ms", "1"])
    assert "p99 TPOT limit" in plain.output


def test_plan_csv_carries_the_figures_at_target_and_the_limits(runner):
    r = runner.invoke(app, ["plan", "-H", f"{HW},b200", "-m", MODEL, "-s", SC, "--target-tokens-per-s", "50000",
                            "--tpot-ms", "30", "--format", "csv"])
    assert r.exit_code == 0, r.output
    rows = list(csv.DictReader(r.stdout.splitlines()))
    assert len(rows) == 2
    for row in rows:
        assert float(row["limit_tpot_ms"]) == 30.0 and float(row["limit_ttft_ms"]) == 1000.0
        assert row["at_target_meets_limits"] == "True" and float(row["at_target_tpot_s"]) <= 0.030


def test_csv_rows_keep_every_column_whatever_the_first_row_has():
    from infersim.cli import _rows_csv

    text = _rows_csv([{"hardware": "x", "feasible": False}, {"hardware": "y", "feasible": True, "accelerators": 8}])
    rows = list(csv.DictReader(text.splitlines()))
    assert rows[0]["accelerators"] == "" and rows[1]["accelerators"] == "8"
