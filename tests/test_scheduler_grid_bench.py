"""benchmarks/scheduler_grid.py: the verdict of a closed-form figure against a noisy oracle."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "benchmarks"))

import scheduler_grid as G  # noqa: E402


def test_a_miss_beyond_the_oracles_noise_is_told_apart_from_one_inside_it():
    sims = {"ttft_mean": np.array([1.0, 1.0, 1.0, 1.0]),       # a quiet oracle
            "ttft_p99": np.array([1.0, 1.3, 0.7, 1.0]),        # a noisy one: ±12.2 % standard error
            "tpot_mean": np.array([2.0, 2.0, 2.0, 2.0])}
    model = {"ttft_mean": 1.10, "ttft_p99": 1.20, "tpot_mean": 2.02}
    v = G.verdicts(model, sims)
    assert v["ttft_mean"][2] == "miss" and v["ttft_mean"][0] == pytest.approx(0.10)
    assert v["ttft_p99"][2] == "noise" and v["ttft_p99"][1] == pytest.approx(np.sqrt(0.06) / 2, rel=1e-9)
    assert v["tpot_mean"][2] == "ok"


def test_the_grid_is_the_test_modules():
    cases = list(G.cases("random", {"d1", "d8"}, None))
    assert len(cases) == 36 and set(G.cases("balanced", {"d1", "d8"}, None)) == {c for c in cases if c[0] == 8}
    assert all(c[3] == 0.9 for c in G.cases("random", {"d1"}, 0.9)) and len(list(G.cases("random", {"d1"}, 0.9))) == 3
    multi = list(G.cases("multistep", {"d1", "d8"}, None))
    assert len(multi) == 12 and {c[4] for c in multi} == {4, 9} and all(c[:2] == (1, "off") for c in multi)
    assert G.multi_step_engine(9, "flat2048").decode_steps == 9


def test_the_script_runs_end_to_end(capsys):
    """A small run through ``main``: one rank's cases at 30 % load, two short seeds; the summary line
    counts the three cases."""
    G.main(["--cases", "d1", "--load", "0.3", "--seeds", "2", "--requests", "2000"])
    out = capsys.readouterr().out
    assert "router random: 2 seeds x 2,000 requests per case" in out
    summary = out.strip().splitlines()[-1]
    assert summary.startswith("cases: ") and " of 3 within every tolerance" in summary
    with pytest.raises(SystemExit):
        G.main(["--seeds", "1"])
