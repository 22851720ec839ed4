"""Traffic as it arrives: trace columns (paired lengths, arrival times, shared prefixes), their
checks, and what they change in the prediction."""

import numpy as np
import pytest

from infersim.api import load_inputs, predict
from infersim.cli import app
from infersim.errors import SpecError
from infersim.serving import WorkloadStats
from infersim.specs.scenario import LengthSpec, WorkloadSpec, apply_trace
from infersim.specs.traffic import read_trace


def _write(tmp_path, text, name="t.csv"):
    f = tmp_path / name
    f.write_text(text)
    return f


def test_paired_lengths_set_the_decode_context(tmp_path):
    # long prompts with long outputs: the running sequences (OSL-length-biased) carry the long prompts
    same = _write(tmp_path, "isl,osl\n100,10\n1000,100\n", "same.csv")
    crossed = _write(tmp_path, "isl,osl\n100,100\n1000,10\n", "crossed.csv")
    base = WorkloadSpec(isl=LengthSpec(mean=1), osl=LengthSpec(mean=1))
    a = WorkloadStats.from_workload(apply_trace(base, same))
    b = WorkloadStats.from_workload(apply_trace(base, crossed))
    osl_term = (10**2 + 100**2) / 2 / (2 * 55)  # E[OSL²]/(2 E[OSL]), the same in both
    assert a.context_mean == pytest.approx((100 * 10 + 1000 * 100) / 2 / 55 + osl_term)
    assert b.context_mean == pytest.approx((100 * 100 + 1000 * 10) / 2 / 55 + osl_term)
    # the unpaired moments alone would give E[ISL] = 550 for both
    assert a.isl_mean == b.isl_mean == 550


def test_independent_lengths_keep_the_unpaired_context():
    wl = WorkloadSpec(isl=LengthSpec(mean=800), osl=LengthSpec(mean=200))
    s = WorkloadStats.from_workload(wl)
    assert s.isl_osl_mean is None and s.context_mean == 800 + 200 / 2


def test_arrival_dispersion_is_measured_from_the_gaps(tmp_path):
    even = read_trace(_write(tmp_path, "isl,osl,arrival_s\n" + "".join(f"10,10,{t}\n" for t in range(50))))
    assert even.arrival_dispersion == pytest.approx(0.0)
    assert even.arrival_rate_per_s == pytest.approx(1.0)
    rng = np.random.default_rng(0)
    gaps = rng.gamma(0.25, 4.0, 20000)  # c_a² = 1/shape = 4
    t = np.cumsum(gaps)
    bursty = read_trace(_write(tmp_path, "isl,osl,arrival_s\n" + "".join(f"10,10,{x:.6f}\n" for x in t), "b.csv"))
    assert bursty.arrival_dispersion == pytest.approx(np.var(np.diff(t)) / np.mean(np.diff(t)) ** 2, rel=1e-6)
    assert 3.6 < bursty.arrival_dispersion < 4.4


def test_prefix_columns_give_the_shared_fraction_and_working_set(tmp_path):
    # a: 400-token prefix seen twice more (the first sighting is a miss), b: 100 tokens seen once
    f = _write(tmp_path, "isl,osl,prefix_id,prefix_tokens\n500,10,a,400\n500,10,a,400\n600,10,b,100\n"
                         "500,10,a,400\n300,10,,0\n")
    wl = apply_trace(WorkloadSpec(isl=LengthSpec(mean=1), osl=LengthSpec(mean=1)), f)
    assert wl.prefix_share_fraction == pytest.approx(800 / 2400)
    assert wl.prefix_working_set_tokens == pytest.approx(500)


def test_trace_prefix_reuse_reaches_kv_routing(tmp_path):
    rows = ["isl,osl,prefix_id,prefix_tokens"] + [f"2000,200,s{i % 4},1500" for i in range(40)]
    f = _write(tmp_path, "\n".join(rows) + "\n")
    args = dict(round="v5.1", batch=64, tp=1)
    plain = predict("h200-sxm", "llama3.1-8b", "chat-1k-1k", 8, trace=f, disable=["kv_routing"], **args)
    routed = predict("h200-sxm", "llama3.1-8b", "chat-1k-1k", 8, trace=f, enable=["kv_routing"], **args)
    assert load_inputs("h200-sxm", "llama3.1-8b", "chat-1k-1k", trace=f).scenario.workload.prefix_share_fraction \
        == pytest.approx(36 * 1500 / (40 * 2000))
    assert routed.metrics["ttft_s"] < plain.metrics["ttft_s"]


BAD = [
    ("isl,osl,arrival_s\n10,10,0\n10,10,2\n10,10,1\n", "row 4, column arrival_s: arrival times must be non-decreasing"),
    ("isl,osl,arrival_s\n10,10,-1\n10,10,2\n10,10,3\n", "row 2, column arrival_s: expected 0 <= arrival_s"),
    ("isl,osl,arrival_s\n10,10,0\n10,10,nan\n10,10,3\n", "row 3, column arrival_s: expected 0 <= arrival_s"),
    ("isl,osl,arrival_s\n10,10,x\n", "row 2, column arrival_s: expected a number of seconds"),
    ("isl,osl,arrival_s\n10,10,5\n10,10,5\n10,10,5\n", "same time"),
    ("isl,osl,arrival_s\n10,10,5\n10,10,6\n", "at least 3 requests"),
    ("isl,osl\n10.5,10\n", "row 2, column isl: expected an integer 0 < isl"),
    ("isl,osl\n10,0\n", "row 2, column osl"),
    ("isl,osl,prefix_id\n10,10,a\n", "go together"),
    ("isl,osl,prefix_id,prefix_tokens\n10,10,a,20\n", "row 2, column prefix_tokens: expected 0 <= prefix_tokens <= isl"),
    ("isl,osl\n10,10,3\n", "row 2: expected 2 fields"),
]


@pytest.mark.parametrize("text,needle", BAD)
def test_bad_trace_names_file_row_and_column(tmp_path, text, needle):
    f = _write(tmp_path, text)
    with pytest.raises(SpecError, match=needle.replace("(", r"\(")) as exc:
        read_trace(f)
    assert str(f) in str(exc.value)


def test_bad_trace_on_the_cli_exits_2(tmp_path, runner):
    f = _write(tmp_path, "isl,osl,arrival_s\n10,10,0\n10,10,2\n10,10,1\n")
    r = runner.invoke(app, ["run", "-H", "h200-sxm", "-m", "llama3.1-8b", "-s", "chat-1k-1k", "--trace", str(f)])
    assert r.exit_code == 2
    assert "arrival_s" in r.output and "Traceback" not in r.output


def test_arrival_dispersion_range_is_checked():
    with pytest.raises(ValueError):
        WorkloadSpec(isl=LengthSpec(mean=1), osl=LengthSpec(mean=1), arrival_dispersion=-0.1)
    with pytest.raises(ValueError):
        WorkloadSpec(isl=LengthSpec(mean=1), osl=LengthSpec(mean=1), arrival_dispersion=101)


def test_bundled_endpoints_scenario_takes_its_trace_columns():
    from infersim.specs import load_scenario

    wl = load_scenario("api-endpoints-bursty").workload
    # README: fitted from the file (the generator's quiet/busy rates 1/s and 8/s, 40 s and 5 s sojourns)
    assert wl.arrival_dispersion == pytest.approx(2.30, abs=0.01) and len(wl.arrival_states) == 2
    (f_quiet, w_quiet), (f_busy, w_busy) = wl.arrival_states
    assert f_quiet == pytest.approx(0.566, abs=0.001) and f_busy == pytest.approx(3.60, abs=0.01)
    assert w_busy == pytest.approx(0.143, abs=0.001)
    assert wl.prefix_share_fraction == pytest.approx(0.176, abs=0.001)
    assert wl.prefix_working_set_tokens == pytest.approx(101_200)
    assert wl.isl_osl_mean is not None and wl.isl.histogram and wl.osl.histogram


def test_plan_takes_its_load_from_a_timestamped_trace(runner, tmp_path):
    import json

    from infersim.specs.traffic import read_trace

    trace = "scenarios/traces/api-endpoints-synthetic-2000.csv"
    tr = read_trace(trace)
    r = runner.invoke(app, ["plan", "-H", "h200-sxm", "-m", "llama3.1-8b", "-s", "chat-1k-1k", "--trace", trace,
                            "--format", "json"])
    assert r.exit_code == 0, r.output
    row = json.loads(r.stdout[r.stdout.index("["):])[0]
    # the load is the trace's arrival rate × its mean output length
    assert row["target_tokens_per_s"] == pytest.approx(tr.arrival_rate_per_s * tr.osl.mean(), rel=1e-9)
    assert row["feasible"] and row["capacity_tokens_per_s"] >= row["target_tokens_per_s"]
    bare = _write(tmp_path, "isl,osl\n100,10\n")
    r = runner.invoke(app, ["plan", "-H", "h200-sxm", "-m", "llama3.1-8b", "-s", "chat-1k-1k", "--trace", str(bare)])
    assert r.exit_code == 2 and "arrival_s" in r.output


def test_arrival_states_must_be_a_distribution_averaging_to_the_mean_rate():
    ok = WorkloadSpec(isl=LengthSpec(mean=1), osl=LengthSpec(mean=1), arrival_states=[(0.5, 0.8), (3.0, 0.2)])
    assert WorkloadStats.from_workload(ok).rate_states == ((0.5, 0.8), (3.0, 0.2))
    for bad in ([(0.5, 0.7), (3.0, 0.2)], [(1.0, 0.8), (3.0, 0.2)], [(1.0, 1.0)]):
        with pytest.raises(ValueError):
            WorkloadSpec(isl=LengthSpec(mean=1), osl=LengthSpec(mean=1), arrival_states=bad)
