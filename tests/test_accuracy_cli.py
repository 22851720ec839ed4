"""The validate and calibrate commands: output contract, refused outputs, refused inputs."""

from __future__ import annotations

import json
import os

import pytest

from infersim.cli import app

from conftest import REPO

SMALL = REPO / "tests" / "data" / "validation_small.csv"


def test_validate_json_has_the_contract_keys(runner):
    result = runner.invoke(app, ["validate", "--data", str(SMALL), "--format", "json"])
    assert result.exit_code == 0, result.output
    d = json.loads(result.stdout)
    for key in ("rows", "median_ape", "p90_ape", "frontier_rows", "frontier_median_ape", "frontier_p90_ape"):
        assert key in d
    assert d["rows"] == 5 and len(d["results"]) == 5


@pytest.mark.parametrize("where", [".", "hardware_profiles", "presets", "ROOT"])
def test_calibrate_out_at_a_bundled_folder_is_refused_before_fitting(runner, where, monkeypatch):
    monkeypatch.chdir(REPO)
    before = {p: p.read_bytes() for d in ("hardware_profiles", "presets") for p in (REPO / d).glob("*.yaml")}
    out = str(REPO) if where == "ROOT" else where
    result = runner.invoke(app, ["calibrate", "--data", str(SMALL), "--out", out])
    assert result.exit_code == 2
    assert "--out" in result.stderr and "Traceback" not in result.output
    assert {p: p.read_bytes() for p in before} == before


def test_calibrate_out_and_in_place_together_are_refused(runner, tmp_path):
    result = runner.invoke(app, ["calibrate", "--data", str(SMALL), "--out", str(tmp_path), "--in-place"])
    assert result.exit_code == 2 and "not both" in result.stderr


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_validate_refuses_a_fifo_as_data(runner, tmp_path):
    fifo = tmp_path / "rows.csv"
    os.mkfifo(fifo)
    result = runner.invoke(app, ["validate", "--data", str(fifo)])
    assert result.exit_code == 2 and "expected a regular file" in result.stderr


def test_validate_refuses_an_unknown_plot_type_and_a_folder_as_out(runner, tmp_path):
    result = runner.invoke(app, ["validate", "--data", str(SMALL), "--plot", str(tmp_path / "x.jpg")])
    assert result.exit_code == 2 and ".jpg" in result.stderr
    assert not (tmp_path / "x.jpg").exists()
    result = runner.invoke(app, ["validate", "--data", str(SMALL), "--out", str(tmp_path)])
    assert result.exit_code == 2 and "directory" in result.stderr


def test_calibrate_one_hardware_writes_only_its_profile(runner, tmp_path):
    """Issue reproducer: ``calibrate --hardware l40s --out DIR`` wrote all 17 profiles."""
    before = {p: p.read_bytes() for d in ("hardware_profiles", "presets") for p in (REPO / d).glob("*.yaml")}
    result = runner.invoke(app, ["calibrate", "--hardware", "l40s", "--out", str(tmp_path / "cal"), "--format", "json"])
    assert result.exit_code == 0, result.output
    d = json.loads(result.stdout)  # progress went to stderr: stdout is one JSON document
    assert set(d["hardware"]) == {"l40s"} and d["presets"] == {} and d["transferred"] == {}
    written = sorted(p.relative_to(tmp_path / "cal").as_posix() for p in (tmp_path / "cal").rglob("*") if p.is_file())
    assert written == ["hardware_profiles/l40s.yaml"]
    assert {p: p.read_bytes() for p in before} == before
    text = (tmp_path / "cal" / "hardware_profiles" / "l40s.yaml").read_text()
    assert "rows: 4" in text and "no rows" not in text


def test_calibrate_refuses_an_operating_points_file_without_its_columns(runner, tmp_path):
    bad = tmp_path / "ops.csv"
    bad.write_text("version,system\nv5.1,x\n")
    result = runner.invoke(app, ["calibrate", "--data", str(SMALL), "--operating-points", str(bad)])
    assert result.exit_code == 2 and "missing required column" in result.stderr and "Traceback" not in result.output
    result = runner.invoke(app, ["calibrate", "--data", str(SMALL), "--operating-points", str(tmp_path / "none.csv")])
    assert result.exit_code == 2


def test_calibrate_with_the_bundled_operating_points_reports_them(runner):
    result = runner.invoke(app, ["calibrate", "--data", str(SMALL), "--bundled-operating-points", "--format", "json"])
    assert result.exit_code == 0, result.output
    d = json.loads(result.stdout)
    # the operating points of the hardware these rows cover, evaluated at the (unfitted) start values
    assert d["after"]["op_rows"] > 0 and d["after"]["op_median_ape"] is not None
    assert {e["hardware"] for e in d["op_errors"]} <= {"h100-sxm", "h200-sxm", "b200", "mi300x"}


@pytest.mark.parametrize("value,message", [("foo", "'foo' is not a calibratable efficiency parameter"),
                                           ("compute_fraction,,gemm_overlap", "expected comma-separated"),
                                           ("compute_fraction,compute_fraction", "names a parameter twice")])
def test_calibrate_refuses_unknown_or_malformed_parameters_before_fitting(runner, value, message):
    result = runner.invoke(app, ["calibrate", "--data", str(SMALL), "--parameters", value])
    assert result.exit_code == 2 and message in result.stderr and "Traceback" not in result.output


def test_calibrate_fits_the_parameters_it_is_given(runner, tmp_path):
    """``--parameters`` replaces the shipped set: only the named fields are fitted and written."""
    result = runner.invoke(app, ["calibrate", "--hardware", "l40s", "--parameters", "compute_fraction,gemm_overlap",
                                 "--format", "json"])
    assert result.exit_code == 0, result.output
    d = json.loads(result.stdout)
    assert d["parameters"] == ["l40s.compute_fraction", "l40s.gemm_overlap"]
    assert set(d["hardware"]["l40s"]) == {"compute_fraction", "gemm_overlap"}


def test_calibrate_cv_plot_is_written_and_its_refusals(runner, tmp_path):
    """``calibrate --cv --plot FILE`` draws the held-out errors; --plot needs --cv, a known image
    suffix and, for an existing file that this command did not write, --force (checked before the fit)."""
    out = tmp_path / "cv.png"
    result = runner.invoke(app, ["calibrate", "--data", str(SMALL), "--cv", "--plot", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"wrote {out}" in result.stderr
    again = runner.invoke(app, ["calibrate", "--data", str(SMALL), "--cv", "--plot", str(out)])
    assert again.exit_code == 0, again.output  # its own earlier output may be replaced
    for args, message in ((["--plot", str(tmp_path / "a.png")], "give --cv"),
                          (["--cv", "--plot", str(tmp_path / "a.jpg")], "--plot must end in")):
        bad = runner.invoke(app, ["calibrate", "--data", str(SMALL), *args])
        assert bad.exit_code == 2 and message in bad.stderr, bad.output
    mine = tmp_path / "mine.png"
    mine.write_bytes(b"not a plot")
    refused = runner.invoke(app, ["calibrate", "--data", str(SMALL), "--cv", "--plot", str(mine)])
    assert refused.exit_code == 2 and "--force" in refused.stderr and mine.read_bytes() == b"not a plot"


@pytest.fixture
def calibrate_calls(monkeypatch):
    """The keywords of each ``accuracy.calibrate`` call the CLI makes (each run with one evaluation)."""
    from infersim import accuracy

    seen = []
    real = accuracy.calibrate

    def spy(*args, **kwargs):
        seen.append(kwargs)
        return real(*args, **{**kwargs, "max_nfev": 1})

    monkeypatch.setattr(accuracy, "calibrate", spy)
    return seen


def test_calibrate_from_defaults_starts_every_value_at_its_default_with_the_folds_budget(runner, calibrate_calls):
    """--from-defaults fits the way each cross-validation fold does (documented defaults, the folds'
    iteration budget), the procedure the shipped values come from; without it the fit starts from
    the profiles' current values."""
    from infersim import accuracy

    seen = calibrate_calls
    for flags in ([], ["--from-defaults"]):
        result = runner.invoke(app, ["calibrate", "--data", str(SMALL), "--format", "json", *flags])
        assert result.exit_code == 0, result.output
    assert "start" not in seen[0] and "max_nfev" not in seen[0]
    assert seen[1]["start"] == "default" and seen[1]["max_nfev"] == accuracy.CV_MAX_NFEV
    # --max-nfev sets the budget either way (the convergence study of the sixteenth session)
    for flags, start in ((["--max-nfev", "3"], None), (["--from-defaults", "--max-nfev", "16"], "default")):
        result = runner.invoke(app, ["calibrate", "--data", str(SMALL), "--format", "json", *flags])
        assert result.exit_code == 0, result.output
        assert seen[-1].get("start") == start and seen[-1]["max_nfev"] == int(flags[-1])
    for bad in ("0", "1001"):
        refused = runner.invoke(app, ["calibrate", "--data", str(SMALL), "--max-nfev", bad])
        assert refused.exit_code == 2 and "--max-nfev" in refused.stderr and "[1, 1000]" in refused.stderr


def test_calibrate_jacobian_flag_is_passed_and_checked(runner, calibrate_calls):
    """--jacobian picks the fit's Jacobian (default: by the start, ``accuracy.JACOBIAN``)."""
    from infersim import accuracy

    seen = calibrate_calls
    for flags in ([], ["--jacobian", "difference"]):
        result = runner.invoke(app, ["calibrate", "--data", str(SMALL), "--format", "json", *flags])
        assert result.exit_code == 0, result.output
    assert "jacobian" not in seen[0] and seen[1]["jacobian"] == "difference"
    assert accuracy.JACOBIAN["current"][0] == "secant"
    refused = runner.invoke(app, ["calibrate", "--data", str(SMALL), "--jacobian", "broyden"])
    assert refused.exit_code == 2 and "--jacobian" in refused.stderr and "secant" in refused.stderr
