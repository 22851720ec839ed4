"""A run whose engine-settings row records nothing is a run without its own settings.

The reference file keeps a row for every MLPerf LLM run; where no config was read it holds only the
run's identity, its target rates and ``config_match`` "none found". Such a row used to count as the
run's own engine (``validate --at-load --run-engine``'s ``run_engine`` flag and ``rows_with_run_engine``
count, the operating points' ``OpRow.run``) although nothing of it was applied.
"""

from __future__ import annotations

import csv
import json

from typer.testing import CliRunner

from infersim import at_load
from infersim.cli import app
from infersim.run_settings import RUN_KEY, engine_settings_data, load_engine_settings, records_settings

EMPTY = {"version": "v5.1", "submitter": "Cisco", "system": "HGX-H100_H100-SXM-80GBx16_TRT",
         "benchmark": "llama2-70b-99", "scenario": "Server", "total_accelerators": "16",
         "framework": "TensorRT 10.8, CUDA 12.8", "config_match": "none found", "log_target_qps": "210",
         "user_conf_target_qps": "210", "source_repo": "mlcommons/inference_results_v5.1"}


def test_a_row_that_records_nothing_is_not_loaded(tmp_path):
    assert not records_settings(EMPTY)
    set_one = {**EMPTY, "system": "other", "max_batch_size": "64"}
    assert records_settings(set_one) and records_settings({**EMPTY, "harness": "NVIDIA harness (TRT-LLM)"})
    f = tmp_path / "settings.csv"
    with f.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=[*EMPTY, "harness", "max_batch_size"])
        w.writeheader()
        w.writerows([EMPTY, set_one])
    runs = load_engine_settings(f)
    assert list(runs) == [tuple(set_one[k] for k in RUN_KEY)]


def test_bundled_rows_without_a_config_are_left_out():
    runs = load_engine_settings()
    with engine_settings_data().open(newline="", encoding="utf-8-sig") as fh:
        rows = list(csv.DictReader(fh))
    none_found = [r for r in rows if r["config_match"].strip() == "none found"]
    assert none_found and all(tuple(r[k].strip() for k in RUN_KEY) not in runs for r in none_found)
    assert len(runs) == len(rows) - len(none_found)  # every other row records a setting
    assert ("v5.1", "AMD", "8xMI300X_2xEPYC_9575F", "llama2-70b-99", "Interactive") in runs


def test_at_load_flags_no_run_engine_for_a_row_without_a_config(tmp_path):
    rows = list(csv.DictReader(at_load.bundled_data().open()))
    keep = [r for r in rows if tuple(r[k] for k in RUN_KEY) == tuple(EMPTY[k] for k in RUN_KEY)]
    assert len(keep) == 1
    f = tmp_path / "ops.csv"
    with f.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(keep)
    r = CliRunner().invoke(app, ["validate", "--at-load", "--run-engine", "--data", str(f), "--format", "json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["predicted_rows"] == 1 and not d["per_row"][0]["run_engine"] and d["rows_with_run_engine"] == 0


def test_every_settings_row_has_exactly_the_header_fields():
    """A row with a stray or missing field (broken quoting) would shift every later column into the
    wrong setting silently: the layout read from the precision column, say."""
    with engine_settings_data().open(newline="", encoding="utf-8-sig") as fh:
        reader = csv.DictReader(fh)
        rows = list(reader)
    assert rows
    bad = [(i + 2, r["system"]) for i, r in enumerate(rows) if None in r or any(v is None for v in r.values())]
    assert not bad, f"rows with a field count other than the header's: {bad[:5]}"


def test_cisco_405b_rows_carry_the_engines_they_ran():
    """Filled in the thirty-sixth session from Cisco's class-style configs (data/README.md)."""
    from infersim.plan import Engine
    from infersim.run_settings import recorded_layout, run_engine

    runs = load_engine_settings()
    h100 = runs[("v5.1", "Cisco", "HGX-H100_H100-SXM-80GBx16_TRT", "llama3.1-405b", "Server")]
    h200 = runs[("v5.1", "Cisco", "C885A_M8_H200_SXM_141GBx16_TRT", "llama3.1-405b", "Offline")]
    assert recorded_layout(h100, moe=False) == (8, 1, 1, 1)
    assert recorded_layout(h200, moe=False) == (4, 2, 1, 1)
    e = run_engine(Engine(), h100)
    assert (e.max_batch_size, e.max_num_tokens, e.chunked_prefill, e.graph_sizes) == (64, 2560, True, ())
    assert e.instance_dispatch == "load_balancing"  # the NVIDIA harness's Server dispatch
