"""Round presets' per-hardware engine settings against the runs' own configs
(data/mlperf_engine_settings.csv): the token budget decides how long a prompt waits at load, so a
hardware override must be what those runs used."""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path

import pytest

from infersim.optimizations.presets import load_preset

SETTINGS = Path(__file__).resolve().parent.parent / "data" / "mlperf_engine_settings.csv"


def _most_common(version: str, benchmark: str, scenario: str, system_has: str) -> tuple[int, int]:
    """(max_batch_size, max_num_tokens) most runs of that round, benchmark, scenario and hardware used."""
    seen = Counter()
    with open(SETTINGS, encoding="utf-8") as f:
        for r in csv.DictReader(f):
            if (r["version"], r["scenario"]) == (version, scenario) and r["benchmark"].startswith(benchmark) \
                    and system_has in r["system"] and r["max_num_tokens"]:
                seen[int(float(r["max_batch_size"])), int(float(r["max_num_tokens"]))] += 1
    assert seen, (version, benchmark, scenario, system_has)
    return seen.most_common(1)[0][0]


def test_v51_llama2_70b_server_on_h200_uses_the_h200_runs_budget():
    e = load_preset("v5.1").engine_for("llama2-70b", "server", "h200-sxm")
    assert (e.max_batch_size, e.max_num_tokens, e.chunked_prefill) == (*_most_common("v5.1", "llama2-70b", "Server", "H200"), True)
    assert e.max_num_tokens == 1536


@pytest.mark.parametrize("hw,kind,expected", [
    ("b200", "server", (2048, 3584)),       # the B200 recipe the model block carries
    ("h200-sxm", "interactive", (768, 768)),  # the H200 override is Server-only (see presets/v5.1.yaml)
    ("h200-sxm", "offline", (2048, 1536)),  # Offline H200 runs: 1536 as well (24 of 24)
])
def test_v51_llama2_70b_override_does_not_leak(hw, kind, expected):
    e = load_preset("v5.1").engine_for("llama2-70b", kind, hw)
    assert (e.max_batch_size, e.max_num_tokens) == expected
