"""data/published_cases.csv: the out-of-sample NON-MLPerf cases parse, their profile IDs resolve
and every usable row states the conditions its prediction needs (benchmarks/published_cases.py
prints the accuracy; this file asserts no accuracy)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "benchmarks"))
import published_cases as pc  # noqa: E402

from infersim.optimizations.presets import load_preset  # noqa: E402
from infersim.specs import catalog  # noqa: E402

ROWS = pc.load_cases()
USABLE = [r for r in ROWS if r["usable"] == "yes"]


def _resolves(kind: str, profile_id: str) -> bool:
    try:
        catalog.load(kind, profile_id)
    except Exception:  # noqa: BLE001 - any failure to load is a bad ID here
        return False
    return True


def test_header_forbids_fitting_and_columns_complete():
    head = [line for line in pc.DATA.read_text(encoding="utf-8").splitlines() if line.startswith("#")]
    assert any("NEVER use these rows for fitting" in line for line in head)
    needed = {"case_id", "source_key", "source_url", "hardware", "model", "accelerators", "isl", "osl", "weights",
              "round", "tp", "ep", "dp", "batch", "mtp_depth", "mtp_accept_len", "enable", "disable", "params",
              "engine", "condition", "condition_value", "metric", "value", "ref_hardware", "ref_accelerators",
              "layout_notes", "assumed", "usable", "reason"}
    assert needed <= set(ROWS[0])
    assert all(None not in r and None not in r.values() for r in ROWS), "ragged row"
    ids = [r["case_id"] for r in ROWS]
    assert len(ids) == len(set(ids))
    assert len(USABLE) >= 10


def test_usable_flag_and_reason_agree():
    for r in ROWS:
        assert r["usable"] in ("yes", "no"), r["case_id"]
        assert bool(r["reason"].strip()) == (r["usable"] == "no"), r["case_id"]
        assert r["source_key"] and r["source_url"] and float(r["value"]) > 0, r["case_id"]


@pytest.mark.parametrize("row", ROWS, ids=[r["case_id"] for r in ROWS])
def test_ids_resolve(row):
    if row["usable"] == "yes" or row["hardware"]:
        assert _resolves("hardware", row["hardware"]), row["hardware"]
    if row["usable"] == "yes" or row["model"]:
        assert _resolves("model", row["model"]), row["model"]
    if row["ref_hardware"]:
        assert _resolves("hardware", row["ref_hardware"])
    load_preset(row["round"])


@pytest.mark.parametrize("row", USABLE, ids=[r["case_id"] for r in USABLE])
def test_usable_conditions_complete(row):
    assert row["metric"] in pc.METRICS and row["condition"] in pc.CONDITIONS
    for name in ("accelerators", "isl", "osl"):
        assert float(row[name]) > 0, name
    assert row["weights"] in ("bf16", "fp16", "fp8", "fp4")
    value = float(row["condition_value"])
    batch = float(row["batch"]) if row["batch"] else None
    if row["condition"] == "batch":
        assert batch == value
    elif row["condition"] == "batch_per_rank":
        assert row["dp"] and batch == value * float(row["dp"])
    elif row["condition"] == "tokens_per_device":
        assert batch is not None and batch * float(row["isl"]) / float(row["accelerators"]) == value
    elif row["condition"] == "per_user_rate":
        assert value > 0 and batch is None
    if row["metric"] == "ratio_tokens_per_s_per_gpu":
        assert row["condition"] == "per_user_rate" and int(row["ref_accelerators"]) > 0
    if row["metric"] == "tokens_per_s_per_user":
        assert row["condition"] == "batch"
    depth = int(row["mtp_depth"] or 0)
    if depth:
        assert "mtp" in pc._list(row["enable"]) and 1 <= float(row["mtp_accept_len"]) <= depth + 1
    elif row["condition"] != "per_user_rate":
        assert "mtp" in pc._list(row["disable"]), "a fixed-batch row without MTP must disable the round's MTP"
    pc.query_kwargs(row)  # the scenario, preset and optimization parameters build


@pytest.mark.parametrize("depth, accept_len", [(1, 1.92), (3, 2.82), (5, 3.01), (2, 1.0), (2, 3.0)])
def test_acceptance_reproduces_accept_length(depth, accept_len):
    p = pc.acceptance_for(depth, accept_len)
    assert len(p) == depth
    total, run = 1.0, 1.0
    for x in p:
        run *= x
        total += run
    assert math.isclose(total, accept_len, rel_tol=1e-9)
    with pytest.raises(ValueError):
        pc.acceptance_for(depth, depth + 1.5)


def test_one_case_predicts():
    row = next(r for r in USABLE if r["case_id"] == "EAGLE3-H100-L8B-BS1-BASE")
    value, why = pc.predict_case(row)
    assert math.isfinite(value) and value > 0 and why.startswith("tp1 ")


def test_bad_input_exits_2(tmp_path):
    assert pc.main(["--hw-set", "efficiency.no_such_field=3"]) == 2
    assert pc.main(["--data", str(tmp_path / "missing.csv")]) == 2
