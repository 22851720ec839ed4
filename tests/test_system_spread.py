"""benchmarks/system_spread.py: the spread of one configuration across submitters' systems, on
hand-made CSVs whose answers are worked out here."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "benchmarks"))

import system_spread as S  # noqa: E402

RESULTS = """version,submitter,system,hardware,model,scenario,accelerators,tokens_per_s,power_mode
v4.1,A,a8,h200-sxm,llama2-70b,offline,8,1000,
v4.1,B,b8,h200-sxm,llama2-70b,offline,8,800,
v4.1,C,c8,h200-sxm,llama2-70b,offline,8,1200,TGP 1000 W
v4.1,A,a8,h200-sxm,llama2-70b,server,8,900,
"""

OPS = """version,submitter,system,hardware,model,benchmark,scenario,total_accelerators,result_validity,scheduled_samples_per_s,tpot_p50_ms,ttft_p99_ms
v5.1,A,a8,b200,llama2-70b,llama2-70b-99,Server,8,VALID,100.0,10,400
v5.1,A,a8,b200,llama2-70b,llama2-70b-99.9,Server,8,VALID,100.0,10,400
v5.1,B,b8,b200,llama2-70b,llama2-70b-99,Server,8,VALID,101.0,12,600
v5.1,C,c8,b200,llama2-70b,llama2-70b-99,Server,8,VALID,130.0,20,900
v5.1,D,d8,b200,llama2-70b,llama2-70b-99,Offline,8,VALID,,,
v5.1,E,e8,,llama2-70b,llama2-70b-99,Server,8,VALID,100.0,50,400
"""


def test_throughput_spread_skips_other_power_and_single_system_groups(tmp_path):
    p = tmp_path / "r.csv"
    p.write_text(RESULTS)
    t = S.throughput_spread(p)
    # the offline group holds A (1000) and B (800); C runs at 1000 W and the server group has one system
    assert t["groups"] == 1 and t["best_over_worst"] == [pytest.approx(1.25)]
    assert t["shortfall_pct"] == [pytest.approx(20.0)]
    assert sorted(t["from_median_pct"]) == [pytest.approx(100 / 9), pytest.approx(100 / 9)]  # median 900


def test_latency_spread_clusters_same_load_runs_and_counts_a_run_once(tmp_path):
    p = tmp_path / "o.csv"
    p.write_text(OPS)
    lat = S.latency_spread(p, tolerance=0.02)
    # A's run is listed under two accuracy targets (counted once); B's rate is within 2 % of A's;
    # C's is not (a cluster of one); the Offline run and the run without a hardware profile are out
    assert lat["clusters"] == 1
    assert sorted(lat["tpot_p50_ape_pct"]) == [pytest.approx(100 / 11), pytest.approx(100 / 11)]  # median 11 ms
    assert sorted(lat["ttft_p99_abs_s"]) == [pytest.approx(0.1), pytest.approx(0.1)]  # median 500 ms
    assert S.latency_spread(p, tolerance=0.5)["clusters"] == 1  # C joins: 3 systems, one cluster
    assert len(S.latency_spread(p, tolerance=0.5)["tpot_p50_ape_pct"]) == 3
