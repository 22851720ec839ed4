"""benchmarks/step_slope.py: the at-load TPOT error against occupancy, on a hand-made report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent / "benchmarks"))

import step_slope as S  # noqa: E402


def _row(hw, occ, pred_ms, meas_ms, disagg=False):
    return {"hardware": hw, "model": "llama2-70b", "disaggregated_run": disagg,
            "measured": {"tpot_p50_ms": meas_ms}, "predicted": {"tpot_p50_ms": pred_ms, "occupancy_per_rank": occ}}


REPORT = {"per_row": [
    _row("b200", 100, 18.0, 20.0), _row("b200", 200, 20.0, 20.0), _row("b200", 400, 22.0, 20.0),
    _row("b200", 800, 24.0, 20.0), _row("b200", 1600, 26.0, 20.0),
    _row("b200", 50, 99.0, 20.0, disagg=True),  # a disaggregated run is left out
    {"hardware": "b200", "model": "llama2-70b", "measured": {"tpot_p50_ms": 20.0}, "predicted": None},  # not predicted
    _row("h200-sxm", 300, 20.0, 20.0),
]}


def test_groups_keep_aggregated_predicted_runs_with_their_error():
    g = S.groups(REPORT)
    assert sorted(g) == [("b200", "llama2-70b"), ("h200-sxm", "llama2-70b")]
    assert [round(e, 3) for _, e in g["b200", "llama2-70b"]] == [-0.1, 0.0, 0.1, 0.2, 0.3]


def test_the_report_shows_a_steep_step_as_a_positive_correlation(tmp_path):
    f = tmp_path / "r.json"
    f.write_text(json.dumps(REPORT))
    out = subprocess.run([sys.executable, str(Path(S.__file__)), "--json", str(f)], capture_output=True, text=True,
                         check=True).stdout
    line = next(x for x in out.splitlines() if x.startswith("b200"))
    # error linear in log2(occupancy): correlation exactly +1; lower third -10 %, upper third +30 %
    assert "+1.00" in line and "-10.0%" in line and "+30.0%" in line
    assert "h200-sxm" not in out  # one run: below --min-rows
