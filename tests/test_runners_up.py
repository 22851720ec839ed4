"""``infersim run --top N``: the configurations the search ranked next to its pick."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import infersim
from infersim.cli import app
from infersim.runners_up import runners_up

H100_405B = ("h100-sxm", "llama3.1-405b", "mlperf-llama3.1-405b-offline", 16)


@pytest.fixture(scope="module")
def h100_405b():
    return infersim.predict(*H100_405B, round="v5.1")


def test_the_pick_comes_first_and_the_others_follow_by_tokens_per_accelerator(h100_405b):
    rows = runners_up(h100_405b, 5)
    assert len(rows) == 6 and [r["rank"] for r in rows] == list(range(6))
    first = rows[0]
    assert first["stops_at"] == "PLACED" and first["of_pick"] == 1.0
    assert first["tokens_per_s_per_accelerator"] == h100_405b.metrics["tokens_per_s_per_accelerator"]
    assert {k: first[k] for k in ("tp", "pp", "ep", "dp")} == {k: h100_405b.config[k] for k in ("tp", "pp", "ep", "dp")}
    ratios = [r["of_pick"] for r in rows]
    assert all(a >= b for a, b in zip(ratios, ratios[1:])) and ratios[-1] < 1.0  # the pick is the best
    keys = [(tuple(r["optimizations"]), r["tp"], r["pp"], r["ep"], r["dp"]) for r in rows]
    assert len(set(keys)) == len(keys)  # one entry per variant and layout
    assert all(r["stops_at"] not in ("OK", "PLACED") for r in rows[1:])


def test_a_runner_up_is_what_pinning_its_layout_and_batch_predicts(h100_405b):
    """Each entry is the search's own figure: pinning the layout and batch gives the same tokens/s."""
    r = next(r for r in runners_up(h100_405b, 5)[1:] if r["tp"] == 8 and r["pp"] == 1)  # the layout the runs used
    pinned = infersim.predict(*H100_405B, round="v5.1", tp=8, pp=1, ep=1, dp=1, batch=r["batch"])
    assert pinned.config["optimizations"] == r["optimizations"]
    assert pinned.metrics["tokens_per_s_per_accelerator"] == pytest.approx(r["tokens_per_s_per_accelerator"], rel=1e-12)


def test_run_top_through_the_cli():
    runner = CliRunner()
    args = ["run", "-H", H100_405B[0], "-m", H100_405B[1], "-s", H100_405B[2], "-n", "16", "--round", "v5.1"]
    out = runner.invoke(app, args + ["--top", "2", "--format", "json"])
    assert out.exit_code == 0, out.output
    d = json.loads(out.output)
    assert [r["rank"] for r in d["runners_up"]] == [0, 1, 2]
    table = runner.invoke(app, args + ["--top", "2"])
    assert table.exit_code == 0 and "configurations by tokens/s per accelerator" in table.output
    for bad, why in ((["--top", "0"], None), (["--top", "101"], "--top must be in [1, 100]"),
                     (["--top", "3", "--qps", "1"], "does not combine with --qps")):
        res = runner.invoke(app, args + bad)
        if why is None:  # 0 is the default: no list
            assert res.exit_code == 0 and "configurations by tokens/s" not in res.output
        else:
            assert res.exit_code == 2 and why in res.output
