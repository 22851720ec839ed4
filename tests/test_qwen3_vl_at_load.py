"""benchmarks/qwen3_vl_at_load.py: the Qwen3-VL Server runs it compares at their measured load are
all found and mapped to a profile, the logs obey Little's law (the comparison rests on it), and the
model's own figures at a given load obey it too (this file asserts no accuracy)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "benchmarks"))
import qwen3_vl_at_load as q  # noqa: E402

from infersim import api  # noqa: E402

RUNS = q.server_runs()


def test_every_published_server_run_maps_to_a_profile():
    # 8 valid v6.0 closed Server runs: 3 GB300, 2 GB200, B300, B200, H200
    assert len(RUNS) == 8
    assert sorted(q.hardware_of(r["system"]) for r in RUNS) == sorted(
        ["gb300-nvl72"] * 3 + ["gb200-nvl72"] * 2 + ["b300", "b200", "h200-sxm"])


@pytest.mark.parametrize("run", RUNS, ids=lambda r: f"{r['submitter']}-{r['system'][:12]}")
def test_logged_in_flight_count_is_rate_times_mean_latency(run):
    rate = float(run["completed_samples_per_s"])
    latency_s = float(run["lat_mean_ms"]) / 1e3
    assert float(run["mean_inflight_queries"]) == pytest.approx(rate * latency_s, rel=0.02)


def test_model_at_load_obeys_littles_law():
    """``occupancy`` counts the sequences in the decode batch: each stays there from its first to its
    last token, mean_latency − mean TTFT, so occupancy = rate × that (Little's law); the requests
    still waiting for their prefill (rate × mean TTFT) are not in it."""
    pred = api.predict("b200", q.MODEL, "mlperf-qwen3-vl-235b-a22b-server", 8, qps=60.0)
    m = pred.metrics
    assert pred.feasible
    assert m["occupancy"] == pytest.approx(60.0 * (m["mean_latency_s"] - m["ttft_mean_s"]), rel=0.05)


def test_gap_per_iteration_spreads_the_latency_gap_over_the_output():
    assert q.little_gap_per_iteration_ms(5.6, 3.8) == pytest.approx(1e3 * 1.8 / 46.0)
    assert q.little_gap_per_iteration_ms(3.0, 4.0, osl=50.0) == pytest.approx(-20.0)
