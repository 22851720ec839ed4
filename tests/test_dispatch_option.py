"""``--dispatch``: how the front end hands requests to several instances (run, plan, pareto; the
Python API's ``dispatch=``). The mechanism itself is checked against the DES in
tests/test_instance_dispatch.py; here: the option reaches the engine, changes only what it should,
and bad values are clear errors."""

from __future__ import annotations

import json

import pytest

from infersim import api
from infersim.cli import app
from infersim.errors import SpecError

# two 8-GPU TP8 instances of Llama-3.1-405B (v5.1 Server): TTFT-bound, where smoother arrivals per
# instance buy capacity
SYSTEM = ("h100-sxm", "llama3.1-405b", "mlperf-llama3.1-405b-server")
ARGS = dict(round="v5.1", tp=8, pp=1)


def _capacity(n: int, dispatch: str | None):
    pred = api.predict(*SYSTEM, n, dispatch=dispatch, **ARGS)
    assert pred.feasible, pred.reason
    return pred


def test_dispatch_reaches_the_engine_and_a_single_instance_ignores_it():
    default, dealt, balanced = (_capacity(16, d) for d in (None, "round_robin", "load_balancing"))
    assert default.config["dispatch"] == "random"  # the round preset's
    assert dealt.config["dispatch"] == "round_robin" and balanced.config["dispatch"] == "load_balancing"
    assert default.config["replicas"] == dealt.config["replicas"] == 2
    # two instances dealt in turn see Erlang-2 arrivals (c_a² 1/2): the TTFT-bound capacity rises
    assert dealt.metrics["tokens_per_s"] > 1.2 * default.metrics["tokens_per_s"]
    # load balancing keeps at least the dealt deal's smoothness (the output lengths vary little here)
    assert balanced.metrics["tokens_per_s"] >= dealt.metrics["tokens_per_s"] * (1 - 1e-9)
    one = [_capacity(8, d).metrics["tokens_per_s"] for d in (None, "round_robin", "load_balancing")]
    assert one[0] == one[1] == one[2]  # one instance takes the whole stream whatever the policy


def test_bad_dispatch_is_a_clear_error():
    with pytest.raises(SpecError, match="--dispatch must be one of random, round_robin, load_balancing, fewest_tokens"):
        api.predict(*SYSTEM, 16, dispatch="fastest", **ARGS)


@pytest.mark.parametrize("argv", [
    ["run", "-H", "h100-sxm", "-m", "llama3.1-8b", "-s", "chat-1k-1k", "--dispatch", "fastest"],
    ["plan", "-H", "h100-sxm", "-m", "llama3.1-8b", "-s", "chat-1k-1k", "--target-tokens-per-s", "1000",
     "--dispatch", "fastest"],
    ["pareto", "-H", "h100-sxm", "-m", "llama3.1-8b", "-s", "chat-1k-1k", "--dispatch", "fastest"],
])
def test_cli_bad_dispatch_exits_2_with_one_line(runner, argv):
    result = runner.invoke(app, argv)
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert lines == ["error: --dispatch must be one of random, round_robin, load_balancing, fewest_tokens (got 'fastest')"]


def test_cli_run_reports_the_dispatch(runner):
    argv = ["run", "-H", "h100-sxm", "-m", "llama3.1-405b", "-s", "mlperf-llama3.1-405b-server", "-n", "16",
            "--round", "v5.1", "--tp", "8", "--pp", "1", "--dispatch", "load_balancing"]
    table = runner.invoke(app, argv)
    assert table.exit_code == 0, table.output
    assert "requests to instances" in table.output and "load balancing" in table.output
    out = runner.invoke(app, [*argv, "--format", "json"])
    assert json.loads(out.stdout)["config"]["dispatch"] == "load_balancing"


def test_plan_sizes_with_the_dispatch_and_reports_it(runner):
    argv = ["plan", "-m", "llama3.1-70b", "-s", "chat-1k-1k", "--target-tokens-per-s", "50000", "-H", "b200",
            "--format", "json"]
    rows = {}
    for how in ("random", "load_balancing"):
        r = runner.invoke(app, [*argv, "--dispatch", how])
        assert r.exit_code == 0, r.output
        (rows[how],) = json.loads(r.stdout)
        assert rows[how]["dispatch"] == how
    rand, bal = rows["random"], rows["load_balancing"]
    # balanced instances queue less: never more accelerators, and at the same fleet a lower p99 TTFT
    assert bal["accelerators"] <= rand["accelerators"]
    if bal["accelerators"] == rand["accelerators"]:
        assert bal["at_target"]["ttft_s"] < rand["at_target"]["ttft_s"]
