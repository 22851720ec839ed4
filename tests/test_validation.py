"""Validation against published rows: reading, frontier, error arithmetic, reasons, outputs."""

from __future__ import annotations

import csv
import io
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from infersim import accuracy, api
from infersim.optimizations import presets
from infersim.errors import SpecError
from infersim.accuracy import PredictionKey, load_rows, make_row, validate

DATA = Path(__file__).resolve().parent / "data"
SMALL = DATA / "validation_small.csv"

# Fake predictions for validation_small.csv, keyed by (hardware, model).
FAKE = {
    ("h100-sxm", "llama2-70b"): 22000.0,   # rows 20000 (+10 %) and 25000 (-12 %)
    ("h200-sxm", "llama2-70b"): 24000.0,   # 30000 → -20 %
    ("b200", "llama3.1-8b"): 50000.0,      # 40000 → +25 %
}


def fake_predictor(calls: list):
    def predictor(key: PredictionKey):
        calls.append(key)
        value = FAKE.get((key.hardware, key.model))
        return (value, "") if value is not None else (None, "infeasible: test says so")
    return predictor


def test_load_rows_types_and_extra_columns():
    rows = load_rows(SMALL)
    assert len(rows) == 5
    r = rows[0]
    assert (r.version, r.hardware, r.model, r.scenario, r.accelerators, r.tokens_per_s) == \
        ("v5.1", "h100-sxm", "llama2-70b", "offline", 8, 20000.0)
    assert r.columns["note"] == "two rows share one system"
    assert r.scenario_id == "mlperf-llama2-70b-offline"
    assert r.line == 2 and r.file == str(SMALL)


def test_missing_column_names_file_and_column():
    with pytest.raises(SpecError) as err:
        load_rows(DATA / "validation_missing_column.csv")
    text = str(err.value)
    assert "validation_missing_column.csv" in text and "accelerators" in text


def test_non_numeric_value_names_file_row_and_column():
    with pytest.raises(SpecError) as err:
        load_rows(DATA / "validation_bad_number.csv")
    text = str(err.value)
    assert "validation_bad_number.csv" in text
    assert "row 2" in text and "line 3" in text
    assert "tokens_per_s" in text and "'fast'" in text


@pytest.mark.parametrize("value", ["0", "-3", "nan", "2.5"])
def test_bad_accelerators_rejected(tmp_path, value):
    p = tmp_path / "x.csv"
    p.write_text(f"version,hardware,model,scenario,accelerators,tokens_per_s\nv5.1,h100-sxm,llama2-70b,offline,{value},1\n")
    with pytest.raises(SpecError, match="accelerators"):
        load_rows(p)


def test_hand_computed_errors_with_injected_predictions():
    calls: list = []
    report = validate(load_rows(SMALL), predictor=fake_predictor(calls))
    # the two h100 rows share one prediction key: 4 distinct predictions for 5 rows
    assert len(calls) == 4
    errors = [r.error_pct for r in report.results]
    # (22000-20000)/20000 = +10 %; (22000-25000)/25000 = -12 %; (24000-30000)/30000 = -20 %;
    # (50000-40000)/40000 = +25 %; the mi300x row has no prediction
    assert errors[:4] == pytest.approx([10.0, -12.0, -20.0, 25.0])
    assert errors[4] is None and report.results[4].reason == "infeasible: test says so"
    s = report.summary
    assert s["rows"] == 5 and s["predicted_rows"] == 4 and s["n_failed"] == 1
    # APEs 10, 12, 20, 25: median (12+20)/2 = 16; p90 at rank 0.9*3 = 2.7 → 20 + 0.7*5 = 23.5
    assert s["median_ape"] == pytest.approx(16.0)
    assert s["p90_ape"] == pytest.approx(23.5)
    # frontier: 25000 (12 %), 30000 (20 %), 40000 (25 %), mi300x (failed)
    assert [r.frontier for r in report.results] == [False, True, True, True, True]
    assert s["frontier_rows"] == 4 and s["frontier_n_failed"] == 1
    assert s["frontier_median_ape"] == pytest.approx(20.0)
    assert s["frontier_p90_ape"] == pytest.approx(24.0)  # rank 0.9*2 = 1.8 → 20 + 0.8*5
    assert s["by_hardware"]["h100-sxm"] == {"rows": 2, "n_failed": 0, "median_ape": pytest.approx(11.0),
                                            "frontier_rows": 1, "frontier_median_ape": pytest.approx(12.0)}
    assert s["by_round"]["v6.0"]["n_failed"] == 1 and s["by_round"]["v6.0"]["median_ape"] is None
    assert list(s["by_round"]) == ["v4.1", "v5.1", "v6.0"]
    assert s["by_scenario"]["server"]["rows"] == 2


def test_predictor_keys_use_round_presets_and_scenario_ids():
    calls: list = []
    validate([make_row("v5.1", "h100-sxm", "llama2-70b", "server", 8, 1.0)], predictor=fake_predictor(calls))
    assert calls == [PredictionKey("v5.1", "h100-sxm", "llama2-70b", "mlperf-llama2-70b-server", 8)]


def test_frontier_selection_on_hand_made_set():
    rows = load_rows(DATA / "frontier_small.csv")
    # groups: (v5.1,h100,offline,8) → 300 wins; acc 4; server; v5.0; h200 tie → first one
    assert accuracy.frontier_mask(rows) == [False, True, False, True, True, True, True, False]


def test_unknown_ids_become_per_row_reasons_and_a_real_row_is_predicted():
    rows = [
        make_row("v5.1", "no-such-gpu", "llama2-70b", "offline", 8, 1000.0),
        make_row("v5.1", "h100-sxm", "no-such-model", "offline", 8, 1000.0),
        make_row("v5.1", "h100-sxm", "llama2-70b", "no-such-scenario", 8, 1000.0),
        make_row("banana", "h100-sxm", "llama2-70b", "offline", 8, 1000.0),
        make_row("v5.1", "h100-sxm", "llama3.1-8b", "offline", 1, 15000.0),
    ]
    report = validate(rows)
    res = report.results
    assert len(res) == 5
    assert res[0].predicted is None and "no-such-gpu" in res[0].reason
    assert res[1].predicted is None and "no-such-model" in res[1].reason
    assert res[2].predicted is None and "mlperf-llama2-70b-no-such-scenario" in res[2].reason
    assert res[3].predicted is None and "banana" in res[3].reason and res[3].preset is None
    # the real row equals a direct call of the public API
    direct = api.predict("h100-sxm", "llama3.1-8b", "mlperf-llama3.1-8b-offline", 1, round="v5.1")
    assert direct.feasible
    assert res[4].predicted == pytest.approx(direct.metrics["tokens_per_s"], rel=1e-12)
    assert res[4].error_pct == pytest.approx((direct.metrics["tokens_per_s"] - 15000.0) / 15000.0 * 100)
    assert report.summary["n_failed"] == 4
    assert "not predicted (4 rows)" in report.to_table()


def test_round_without_preset_uses_nearest_earlier(tmp_path):
    bundled = accuracy.preset_rounds()
    for name in ("v4.1", "v5.1"):
        shutil.copy(presets.presets_dir() / f"{name}.yaml", tmp_path)
    assert accuracy.resolve_preset("v5.0", tmp_path) == "v4.1"
    assert accuracy.resolve_preset("v7.2", tmp_path) == "v5.1"
    assert accuracy.resolve_preset("v3.0", tmp_path) == "v4.1"  # before all presets: the earliest
    assert accuracy.resolve_preset(bundled[-1]) == bundled[-1]
    with pytest.raises(SpecError):
        accuracy.resolve_preset("latest-ish", tmp_path)


def test_json_and_csv_outputs_keep_every_row_and_column():
    report = validate(load_rows(SMALL), predictor=fake_predictor([]))
    d = json.loads(report.to_json())
    for key in ("rows", "median_ape", "p90_ape", "frontier_rows", "frontier_median_ape", "frontier_p90_ape",
                "n_failed", "by_hardware", "by_model", "by_scenario", "by_round"):
        assert key in d
    assert d["rows"] == 5 and len(d["results"]) == 5
    first = d["results"][0]
    assert first["note"] == "two rows share one system" and first["submitter"] == "A"
    assert first["predicted_tokens_per_s"] == 22000.0 and first["error_pct"] == pytest.approx(10.0)
    assert first["frontier"] is False and d["results"][4]["predicted_tokens_per_s"] is None
    back = list(csv.DictReader(io.StringIO(report.to_csv())))
    assert len(back) == 5
    assert back[0]["system"] == "sys-a" and float(back[0]["error_pct"]) == pytest.approx(10.0)
    assert back[4]["predicted_tokens_per_s"] == "" and back[4]["reason"].startswith("infeasible")
    assert back[1]["frontier"] == "true"
    assert report.render("table").startswith("data:")
    with pytest.raises(SpecError):
        report.render("xml")


def test_plot_is_written_atomically(tmp_path):
    report = validate(load_rows(SMALL), predictor=fake_predictor([]))
    out = accuracy.plot(report, tmp_path / "acc.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in tmp_path.iterdir()] == ["acc.png"]  # no temporary file left behind


def test_cv_plot_is_written_atomically_and_refuses_bad_input(tmp_path):
    """``plot_cv`` draws each fold kind's held-out rows (cross_validate's ``held_out`` tables); an
    unknown suffix, a folder or a result without folds is a SpecError, and no file is left then."""
    def row(v, m, pub, pred):
        return {"version": v, "hardware": "h100-sxm", "model": m, "published_tokens_per_s": pub,
                "predicted_tokens_per_s": pred}
    cv = {"leave_one_round_out": {"median_ape": 8.0, "p90_ape": 30.0,
                                  "held_out": [row("v5.1", "llama2-70b", 1e4, 1.2e4), row("v6.0", "deepseek-r1", 5e5, 3e5),
                                               row("v6.0", "deepseek-r1", 2e3, None)]},
          "leave_one_model_out": {"median_ape": 9.0, "p90_ape": 35.0,
                                  "held_out": [row("v5.1", "llama2-70b", 1e4, 0.9e4), row("v4.1", "mixtral-8x7b", 3e3, 9e3)]}}
    out = accuracy.plot_cv(cv, tmp_path / "cv.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in tmp_path.iterdir()] == ["cv.png"]
    for bad in (tmp_path / "cv.bmp", tmp_path):
        with pytest.raises(SpecError):
            accuracy.plot_cv(cv, bad)
    with pytest.raises(SpecError):
        accuracy.plot_cv({"leave_one_round_out": {"rows": 0}}, tmp_path / "none.png")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cv.png"]


def test_progress_and_parallel_workers_agree():
    rows = [make_row("v5.1", "h100-sxm", "llama3.1-8b", s, n, 1000.0) for s in ("offline", "server")
            for n in (1, 2, 4)]
    seen = []
    serial = validate(rows, workers=1, progress=lambda i, n: seen.append((i, n)))
    assert seen[-1] == (6, 6)
    parallel = validate(rows, workers=2)
    assert [r.predicted for r in parallel.results] == [r.predicted for r in serial.results]


def test_whole_bundled_data_set_is_predicted_or_explained():
    rows = load_rows(accuracy.bundled_data())
    assert len(rows) == 442
    report = validate(rows)
    s = report.summary
    assert s["rows"] == 442 and len(report.results) == 442
    assert s["predicted_rows"] + s["n_failed"] + s["not_modelled_rows"] == 442
    assert all(r.reason for r in report.results if r.predicted is None)
    assert all(math.isfinite(r.error_pct) for r in report.results if r.predicted is not None)
    # every group with a run at the part's standard power has one frontier row
    assert s["frontier_rows"] == len({r.group for r in rows if not r.power_mode})
    # NVIDIA's H200 runs at TGP 1000 W (the CTS systems, "H200 TGP 1000W" in their system descriptions;
    # v4.0's results name them H200-Full) and the power-capped MaxQ runs are not the 700 W part
    off = [r for r in report.results if r.not_modelled]
    assert {r.row.columns["power_mode"] for r in off} == {"TGP 1000 W", "MaxQ"}
    assert len(off) == 10 and all(r.row.hardware == "h200-sxm" and not r.frontier for r in off)
    assert np.isfinite(s["median_ape"])


def test_a_run_at_another_power_configuration_is_not_modelled_nor_frontier(tmp_path):
    """A row whose ``power_mode`` is set (a GPU run at another board power than its profile's)
    is reported as not modelled, apart from failures, and never becomes its group's frontier row
    even when it is the group's best result; the fit never sees it."""
    p = tmp_path / "power.csv"
    p.write_text("version,hardware,model,scenario,accelerators,tokens_per_s,power_mode\n"
                 "v4.1,h200-sxm,llama2-70b,offline,8,34864,TGP 1000 W\n"
                 "v4.1,h200-sxm,llama2-70b,offline,8,31303,\n"
                 "v4.1,h200-sxm,llama2-70b,offline,1,4488,TGP 1000 W\n")
    rows = load_rows(p)
    assert [r.power_mode for r in rows] == ["TGP 1000 W", "", "TGP 1000 W"]
    assert accuracy.frontier_mask(rows) == [False, True, False]
    calls: list = []
    report = validate(rows, predictor=fake_predictor(calls))
    assert len(calls) == 1  # only the standard-power row is predicted
    s = report.summary
    assert s["predicted_rows"] == 1 and s["n_failed"] == 0 and s["not_modelled_rows"] == 2
    assert s["frontier_rows"] == 1
    assert report.results[0].reason.startswith("not modelled: power mode 'TGP 1000 W'")
    assert "1 predicted, 0 not predicted, 2 not modelled" in report.to_table()
    from infersim.accuracy.fit import fit_rows

    fitted, bad = fit_rows(rows, None)
    assert [f.row.tokens_per_s for f in fitted] == [31303.0] and bad == []


def test_schema_descriptions_are_the_attribute_docstrings():
    """``infersim schema`` carries each field's docstring as its description, read on demand
    (``specs.docs``; the classes are built without reading their source at import), a
    subclass's docstring overriding its base's and an explicit description kept."""
    from infersim.specs import catalog
    from infersim.specs.docs import attribute_docstrings
    from infersim.specs.hardware import HardwareSpec

    s = catalog.schema("hardware")
    docs = attribute_docstrings(HardwareSpec)
    assert docs and all(s["properties"][k]["description"] == v for k, v in docs.items() if k in s["properties"])
    defs = s["$defs"]
    described = sum("description" in p for d in defs.values() for p in d.get("properties", {}).values())
    assert described >= 50
    for props in (d.get("properties", {}) for d in defs.values()):
        for p in props.values():
            assert list(p) == sorted(p)  # keys in pydantic's order (sorted), descriptions included
