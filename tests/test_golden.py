"""Golden outputs of ``infersim run --format json`` on representative cases.

A golden changes only when a modelling change explains it: regenerate with
``python -m pytest tests/test_golden.py --regen-golden`` and review the JSON diff like code.
Numbers compare with a relative tolerance of 1e-6 (float summation order may differ across
numpy builds); everything else compares exactly.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from infersim.cli import app

GOLDEN = Path(__file__).resolve().parent / "golden"

CASES: dict[str, list[str]] = {
    "llama3.1-8b-h100-offline": ["-H", "h100-sxm", "-m", "llama3.1-8b", "-s", "mlperf-llama3.1-8b-offline", "-n", "1"],
    "llama2-70b-h200-server": ["-H", "h200-sxm", "-s", "mlperf-llama2-70b-server", "-n", "8"],
    "llama2-70b-h200-server-tp2-explain": ["-H", "h200-sxm", "-s", "mlperf-llama2-70b-server", "-n", "8", "--tp", "2",
                                           "--explain"],
    "llama3.1-405b-b200-interactive": ["-H", "b200", "-s", "mlperf-llama3.1-405b-interactive", "-n", "8"],
    "mixtral-mi300x-offline": ["-H", "mi300x", "-s", "mlperf-mixtral-8x7b-offline", "-n", "8"],
    "deepseek-r1-gb300-server-v6.0": ["-H", "gb300-nvl72", "-s", "mlperf-deepseek-r1-server", "-n", "72",
                                      "--round", "v6.0"],
    "deepseek-r1-gb300-server-v5.1": ["-H", "gb300-nvl72", "-s", "mlperf-deepseek-r1-server", "-n", "72",
                                      "--round", "v5.1"],
    "deepseek-r1-b200-interactive-mtp": ["-H", "b200", "-s", "mlperf-deepseek-r1-interactive", "-n", "8",
                                         "--enable", "mtp"],
    "llama3.1-70b-h200-chat-disagg": ["-H", "h200-sxm", "-m", "llama3.1-70b", "-s", "chat-1k-1k", "-n", "8",
                                      "--enable", "disagg"],
    "gpt-oss-120b-mi355x-offline-price": ["-H", "mi355x", "-m", "gpt-oss-120b", "-s", "mlperf-gpt-oss-120b-offline",
                                          "-n", "8", "--price-per-hour", "3.0"],
    "llama3.1-70b-b200-chat-trace": ["-H", "b200", "-m", "llama3.1-70b", "-s", "chat-trace", "-n", "8"],
    "tpu-v6e-llama3.1-8b-server": ["-H", "tpu-v6e", "-m", "llama3.1-8b", "-s", "mlperf-llama3.1-8b-server", "-n", "8"],
}


def _close(got, want, path: str = "") -> list[str]:
    """Differences between two JSON values (numbers within rtol 1e-6)."""
    if isinstance(want, dict) and isinstance(got, dict):
        diffs = [f"{path}.{k}: missing" for k in want if k not in got]
        diffs += [f"{path}.{k}: unexpected" for k in got if k not in want]
        for k in want:
            if k in got:
                diffs += _close(got[k], want[k], f"{path}.{k}")
        return diffs
    if isinstance(want, list) and isinstance(got, list):
        if len(want) != len(got):
            return [f"{path}: length {len(got)} != {len(want)}"]
        return [d for i, (g, w) in enumerate(zip(got, want)) for d in _close(g, w, f"{path}[{i}]")]
    if isinstance(want, (int, float)) and isinstance(got, (int, float)) and not isinstance(want, bool):
        if math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-12):
            return []
        return [f"{path}: {got!r} != {want!r}"]
    return [] if got == want else [f"{path}: {got!r} != {want!r}"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_run_json_matches_golden(case, runner, regen_golden):
    result = runner.invoke(app, ["run", *CASES[case], "--format", "json"])
    assert result.exit_code in (0, 1), result.output
    got = json.loads(result.stdout)
    path = GOLDEN / f"{case}.json"
    if regen_golden:
        path.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
        pytest.skip("golden regenerated")
    want = json.loads(path.read_text())
    diffs = _close(got, want)
    assert not diffs, f"{case}: {len(diffs)} differences, first: " + "; ".join(diffs[:8])
