"""The public API and the one-evaluation contract: a point alone equals the same point in a grid
(every optimization, disaggregation included); step time never falls when a sequence is added;
search, Pareto, explain and ablation are views of the evaluated ``Result``."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import infersim
from infersim import api
from infersim import optimizations as opt
from infersim.engine import step_cost
from infersim.graph import Layout, Shape
from infersim.query import Query

import strategies as S

# ---- public API ---------------------------------------------------------------------------------


def test_public_api_lists_and_resolves_every_name():
    assert {"predict", "evaluate", "explain", "validate", "calibrate", "load_profile", "Query", "Result"} <= set(
        infersim.__all__)
    for name in infersim.__all__:
        assert getattr(infersim, name) is not None


def test_no_public_name_shadows_a_module():
    """A lazy public name equal to a submodule's would replace it on the package: ``from infersim
    import X`` (as the CLI imports its modules) would get the function in a fresh process and the
    module once something had imported it (``infersim curve`` failed so, the fortieth session)."""
    pkg = Path(infersim.__file__).resolve().parent
    modules = {p.stem for p in pkg.glob("*.py")} | {p.name for p in pkg.iterdir() if (p / "__init__.py").exists()}
    assert not set(infersim.__all__) & modules


def test_import_is_light_and_lists_the_api():
    code = "import sys, infersim; print(infersim.__all__); print('numpy' in sys.modules, 'scipy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert "predict" in out[0]
    assert out[1] == "False False"  # nothing heavy until a function is used


def test_version_has_one_source():
    import tomllib
    from pathlib import Path

    pyproject = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())
    assert "version" in pyproject["project"]["dynamic"]
    assert "version" not in pyproject["project"]
    assert infersim.__version__.count(".") == 2


def test_readme_python_api_example_runs():
    """The README's 'Python API' block is executed as written."""
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    block = text.split("## Python API", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    namespace: dict = {}
    exec(compile(block, "README.md", "exec"), namespace)  # noqa: S102 - our own documentation
    assert namespace["pred"].feasible


# ---- step time is monotone in the batch (every optimization) -------------------------------------

_ALL = {"fusion": {}, "overlap": {"hidden_fraction": 0.8}, "mtp": {"depth": 2}, "attention_dp": {}, "wide_ep": {},
        "kv_routing": {}, "disagg": {}}


@given(plan=S.plans(with_transforms=False), kinds=st.lists(st.sampled_from(sorted(_ALL)), unique=True),
       batch=st.integers(1, 4096), ctx=st.sampled_from([128.0, 2048.0, 16384.0]),
       prefill=st.sampled_from([0.0, 1.0, 4.0]), data=st.data())
@S.examples(150)
def test_step_time_never_falls_when_a_sequence_is_added(plan, kinds, batch, ctx, prefill, data):
    plan = opt.apply_all(plan, [opt.make(k, _ALL[k]) for k in kinds])
    layout = data.draw(S.layouts_for(plan.model, 16))
    q = 1.0 + plan.serving.draft_depth
    def t(b):
        shape = Shape(decode_seqs=float(b), decode_q=q, decode_ctx=ctx, prefill_seqs=prefill, prefill_len=1000.0,
                      prefill_len_sq=1e6)
        return float(step_cost(plan, layout, shape).total)
    assert t(batch + 1) >= t(batch) * (1 - 1e-12), (kinds, layout, batch)


def test_overlap_regression_batch_1023_to_1024():
    """Issue 9's reproducer: with overlap, llama3.1-70b tp 8 got faster when a sequence was added."""
    base = api.base_plan(*_query("h200-sxm", "llama3.1-70b", "chat-1k-1k", 8, tp=8))
    plan = opt.apply_all(base, [opt.make("fusion"), opt.make("overlap")])
    lay = Layout(tp=8)
    t = [float(step_cost(plan, lay, Shape(decode_seqs=b, decode_ctx=1500.0)).total) for b in (1023.0, 1024.0)]
    assert t[1] >= t[0]


def _query(hw, model, scenario, n, **layout):
    q = Query.build(hw, model, scenario, n, **layout)
    return q.inputs, q.software, q.layout


# ---- a point alone equals the same point in the grid (every optimization) ------------------------

_GRID_CASES = [
    ("h200-sxm", "llama3.1-70b", "chat-1k-1k", 8),
    ("b200", "deepseek-r1", "mlperf-deepseek-r1-interactive", 8),
    ("h100-sxm", "llama3.1-8b", "mlperf-llama3.1-8b-offline", 2),
    ("mi300x", "mixtral-8x7b", "mlperf-mixtral-8x7b-server", 8),
]


@pytest.mark.parametrize("kind", sorted(_ALL))
@given(case=st.sampled_from(_GRID_CASES), data=st.data())
@S.examples(6)
def test_point_alone_equals_the_point_in_the_grid(kind, case, data):
    hw, model, scenario, n = case
    others = [k for k in sorted(_ALL) if k != kind]
    query = Query.build(hw, model, scenario, n, enable=[kind], disable=others, params={kind: _ALL[kind]})
    results = api.evaluate(query)
    k = data.draw(st.integers(0, len(results) - 1))
    res = results[k]
    i = data.draw(st.integers(0, len(res.layouts["tp"]) - 1))
    j = data.draw(st.integers(0, len(res.batch) - 1))
    fixed = {a: int(res.layouts[a][i]) for a in ("tp", "pp", "ep", "dp")}
    alone_q = Query.build(hw, model, scenario, n, enable=[kind], disable=others, params={kind: _ALL[kind]},
                          batch=float(res.batch[j]), **fixed)
    alone = [r for r in api.evaluate(alone_q) if r.plan.applied == res.plan.applied
             and r.plan.serving.draft_depth == res.plan.serving.draft_depth]
    assert len(alone) == 1
    one = alone[0]
    assert one.ok.shape == (1, 1)
    assert bool(one.ok[0, 0]) == bool(res.ok[i, j])
    assert int(one.reason[0, 0]) == int(res.reason[i, j])
    for name, arr in res.metrics.items():
        np.testing.assert_allclose(one.metrics[name][0, 0], arr[i, j], rtol=1e-9, err_msg=f"{kind}: {name} at {fixed}")
    assert one.config_at(0, 0) == res.config_at(i, j)


# ---- views of one Result ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def chat_prediction():
    return api.predict("h200-sxm", "llama3.1-70b", "chat-1k-1k", 8)


def test_best_point_is_the_argmax_of_the_evaluated_grid(chat_prediction):
    pred = chat_prediction
    best = max(float(np.max(r.score)) for r in pred.results)
    assert pred.metrics["tokens_per_s_per_accelerator"] == pytest.approx(best, rel=1e-12)
    i, j = pred.index
    assert pred.result.metrics_at(i, j) == pred.metrics


def test_explain_prices_exactly_the_predicted_step(chat_prediction):
    rows = api.explain(chat_prediction)
    assert sum(r["time_s"] for r in rows) == pytest.approx(chat_prediction.breakdown["step_s"], rel=1e-9)
    assert all(r["time_s"] > 0 for r in rows)


def test_explain_of_a_vision_language_model_is_finite():
    """A vision-language prompt's step carries its images (``Shape.prefill_patches_sq`` None: one image
    of ``prefill_patches``): the chosen point's shape keeps that None (it had become NaN, and every
    share of the decode table with it), and the prompt table prices the image's encoder and attention
    beside its text."""
    import math

    pred = api.predict("b200", "qwen3-vl-235b-a22b", "mlperf-qwen3-vl-235b-a22b-server", 8, round="v6.0")
    rows = api.explain(pred)
    assert all(math.isfinite(r["share"]) for r in rows) and sum(r["share"] for r in rows) == pytest.approx(1.0)
    e = api.explain_prompt(pred)
    assert math.isfinite(e["seconds_per_token"]) and e["seconds_per_token"] > 0
    assert {"vision_encoder", "vision_attention"} <= {r["op"] for r in e["rows"]}


def test_explain_prompt_prices_one_prompt_token():
    """``api.explain_prompt``: one mean prompt beside the chosen decode step, by operator, per prompt
    token. The rows add up to the per-token cost and the prompt's time to it times its length; the
    prompt's attention over its own context doubles with its length (E[ISL²]/E[ISL]) while its GEMMs
    per token stay within 10 %; tensor parallelism adds the all-reduces; a disaggregated
    configuration prefills on its own pool's layout and is not priced here."""
    parts = {}
    for isl in (1000, 2000):
        pred = api.predict("h100-sxm", "llama3.1-8b", "mlperf-llama3.1-8b-offline", 1, isl=isl, tp=1, batch=64)
        e = api.explain_prompt(pred)
        assert e["prompt_tokens"] == pytest.approx(isl)
        assert sum(r["time_s"] for r in e["rows"]) == pytest.approx(e["seconds_per_token"], rel=1e-9)
        assert sum(r["share"] for r in e["rows"]) == pytest.approx(1.0)
        assert e["prompt_s"] == pytest.approx(e["seconds_per_token"] * isl)
        assert not any(r["kind"] == "comm" for r in e["rows"])
        parts[isl] = ({r["op"]: r["time_s"] for r in e["rows"]},
                      sum(r["time_s"] for r in e["rows"] if r["kind"] == "gemm"))
    assert parts[2000][0]["attention_prefill"] / parts[1000][0]["attention_prefill"] == pytest.approx(2.0, rel=0.05)
    assert parts[2000][1] == pytest.approx(parts[1000][1], rel=0.10)
    tp2 = api.explain_prompt(api.predict("h100-sxm", "llama3.1-8b", "mlperf-llama3.1-8b-offline", 2, tp=2, batch=64))
    assert {"attn_all_reduce", "mlp_all_reduce"} <= {r["op"] for r in tp2["rows"]}
    # disaggregated: one prompt alone on a prefill worker of the chosen prefill layout, what the pool
    # prices as a lone prompt's prefill (disagg_eval.PrefillPool.t_alone)
    from infersim import disagg_eval

    disagg = api.predict("h100-sxm", "llama3.1-8b", "mlperf-llama3.1-8b-server", 8, enable=["disagg"])
    e = api.explain_prompt(disagg)
    lay = disagg.config["prefill_layout"]
    assert e["where"] == "prefill worker" and e["layout"] == {k: lay[k] for k in ("tp", "pp", "ep", "dp")}
    assert not any(r["op"].startswith("attention_decode") for r in e["rows"])
    assert sum(r["time_s"] for r in e["rows"]) == pytest.approx(e["seconds_per_token"], rel=1e-9)
    pool, _ = disagg_eval.prefill_options(disagg.result.plan, disagg.result.stats,
                                          {k: np.array([lay[k]]) for k in ("tp", "pp", "ep", "dp")}, 8, True)
    assert e["prompt_s"] == pytest.approx(float(pool.t_alone[0]), rel=1e-9)
    # under the overlap optimization a prompt step runs as two micro-batches, half its all-reduces
    # hidden: the operators split the step as its kinds do (the collectives at their exposed share)
    big = api.predict("b200", "llama3.1-405b", "mlperf-llama3.1-405b-server", 8, round="v6.0")
    assert big.config["tp"] > 1 and "overlap" in big.config["optimizations"]
    e = api.explain_prompt(big)
    assert sum(r["time_s"] for r in e["rows"]) == pytest.approx(e["seconds_per_token"], rel=1e-9)
    assert 0.0 < sum(r["share"] for r in e["rows"] if r["kind"] == "comm") < 0.5


def test_pareto_points_are_non_dominated_and_flag_limits(chat_prediction):
    from infersim.pareto import frontier_points

    pts = frontier_points(chat_prediction)
    assert len(pts) >= 3
    users = [p["tokens_per_s_per_user"] for p in pts]
    accs = [p["tokens_per_s_per_accelerator"] for p in pts]
    assert users == sorted(users) and accs == sorted(accs, reverse=True)
    assert any(p["meets_limits"] for p in pts) and all("tpot_p99_s" in p for p in pts)
    assert max(p["tokens_per_s_per_accelerator"] for p in pts if p["meets_limits"]) <= accs[0] + 1e-9


def test_pareto_counts_idle_accelerators_like_run():
    """On 9 GPUs whole instances leave accelerators idle: the frontier's tokens/s per accelerator is the
    system's over all 9, so its best point that meets the limits is exactly ``run``'s prediction
    (before, a point was shown at its instance's own rate, above anything ``run`` could deliver)."""
    from infersim.pareto import frontier_points

    pred = api.predict("h100-sxm", "llama2-70b", "mlperf-llama2-70b-server", 9)
    pts = frontier_points(pred)
    best = max(p["tokens_per_s_per_accelerator"] for p in pts if p["meets_limits"])
    assert best == pytest.approx(pred.metrics["tokens_per_s_per_accelerator"], rel=1e-9)


def test_ablation_skips_levers_that_cannot_act_and_says_why():
    """Issue 14's reproducer: llama3.1-405b has no MTP heads and no experts."""
    from infersim.ablation import round_waterfall

    ab = round_waterfall("b300", None, "mlperf-llama3.1-405b-interactive", 8, from_round="v5.1", to_round="v6.0")
    steps = [r["step"] for r in ab.rows]
    assert not any("mtp" in s or "wide_ep" in s or "attention_dp" in s for s in steps)
    assert "MTP" in ab.skipped["mtp"] or "multi-token" in ab.skipped["mtp"]
    assert "mixture-of-experts" in ab.skipped["wide_ep"]


def test_ablation_with_every_lever_on_is_the_run_prediction():
    """The waterfall's last step and the leave-one-out reference are the round's software as
    ``infersim run`` predicts it: a lever the preset offers as a choice stays a choice there (the
    search may leave it off and tries every MTP depth up to the preset's), not forced on at the
    preset's depth. Before, MTP was forced at depth 3 and disaggregation on, so GB300 x72
    Interactive read 2,850 tokens/s/GPU under ablate against 3,315 under run."""
    from infersim.ablation import waterfall

    ab = waterfall("b200", "deepseek-r1", "mlperf-deepseek-r1-interactive", 8, round="v6.0")
    run = api.predict("b200", "deepseek-r1", "mlperf-deepseek-r1-interactive", 8, round="v6.0")
    assert ab.rows[-1]["tokens_per_s_per_accelerator"] == pytest.approx(run.metrics["tokens_per_s_per_accelerator"],
                                                                          rel=1e-12)
    assert ab.rows[-1]["config"]["mtp_depth"] == run.config["mtp_depth"]
    assert ab.rows[0]["config"]["mtp_depth"] == 0 and not ab.rows[0]["config"]["disaggregated"]


def test_set_fixes_the_mtp_depth_exactly():
    """Issue 14's reproducer: --set mtp.depth=3 must mean 3, not 'at most 3'."""
    query = Query.build("b200", None, "mlperf-deepseek-r1-interactive", 8, enable=["mtp"], params={"mtp": {"depth": 3}})
    depths = {r.plan.serving.draft_depth for r in api.evaluate(query)}
    assert depths == {3}
    free = Query.build("b200", None, "mlperf-deepseek-r1-interactive", 8, enable=["mtp"])
    assert {r.plan.serving.draft_depth for r in api.evaluate(free)} == {1, 2, 3}


def test_run_json_and_explain_through_the_cli(runner):
    from infersim.cli import app

    r = runner.invoke(app, ["run", "-H", "h100-sxm", "-m", "llama3.1-8b", "-s", "mlperf-llama3.1-8b-offline", "-n", "1",
                            "--format", "json", "--explain"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["feasible"] and d["explain"] and d["tokens_per_s"] > 0
    assert sum(x["time_s"] for x in d["explain"]) == pytest.approx(d["breakdown"]["step_s"], rel=1e-9)
    e = d["explain_prompt"]
    assert e["rows"] and sum(x["time_s"] for x in e["rows"]) == pytest.approx(e["seconds_per_token"], rel=1e-9)


def test_pareto_and_ablate_through_the_cli(runner):
    from infersim.cli import app

    r = runner.invoke(app, ["pareto", "-H", "h100-sxm", "-m", "llama3.1-8b", "-s", "mlperf-llama3.1-8b-server", "-n",
                            "1", "--format", "json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)[0]["tokens_per_s_per_user"] > 0
    r = runner.invoke(app, ["ablate", "-H", "h100-sxm", "-m", "llama3.1-8b", "-s", "mlperf-llama3.1-8b-server", "-n",
                            "1", "--format", "json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["waterfall"][0]["step"].startswith("baseline") and "attention_dp" in d["skipped"]


def test_round_waterfall_steps_end_at_the_target_round_and_price_engine_settings():
    """The cumulative steps are round B's software limited to the levers on so far, so the last
    lever step is round B itself; a lever B offers as a choice stays a choice (a step never loses
    throughput by being forced on), and B's engine settings are a step of their own."""
    from infersim.ablation import round_waterfall

    ab = round_waterfall("b200", None, "mlperf-deepseek-r1-interactive", 8, from_round="v5.1", to_round="v6.0")
    steps = [r["step"] for r in ab.rows]
    assert any("engine settings" in s for s in steps)
    tps = [r["tokens_per_s_per_accelerator"] for r in ab.rows]
    lever_rows = [i for i, s in enumerate(steps) if s.startswith(("+ mtp", "+ disagg"))]
    assert lever_rows, steps
    for i in lever_rows:
        assert tps[i] >= tps[i - 1] * (1 - 1e-9), (steps[i], tps[i - 1], tps[i])
    from infersim.optimizations.presets import load_preset

    own = api.predict(None, None, None, 8, inputs=api.load_inputs("b200", None, "mlperf-deepseek-r1-interactive"),
                      preset=load_preset("v6.0"))  # round B predicted on its own, not through the waterfall
    assert tps[-2] == pytest.approx(own.metrics["tokens_per_s_per_accelerator"], rel=1e-9)
    assert tps[-1] == pytest.approx(tps[-2], rel=1e-9)
    # Server: the v6.0 recipe runs neither MTP nor disaggregation, so they are skipped with that reason
    server = round_waterfall("b200", None, "mlperf-deepseek-r1-server", 8, from_round="v5.1", to_round="v6.0")
    assert not any(r["step"].startswith(("+ mtp", "+ disagg")) for r in server.rows)
    assert all("recipe" in server.skipped[k] and "disable" in server.skipped[k] for k in ("mtp", "disagg"))


def test_prediction_says_which_levers_of_the_round_it_left_off_and_why():
    """A lever the round offers but the recipe does not run is reported with that reason (JSON
    ``skipped``, the report's "not used" rows); forcing it on removes it from the list."""
    p = api.predict("gb300-nvl72", "deepseek-r1", "mlperf-deepseek-r1-server", 72, round="v6.0")
    d = p.to_dict()
    for k in ("mtp", "disagg"):
        assert "recipe" in d["skipped"][k] and f"--enable {k}" in d["skipped"][k]
    assert "prefixes" in d["skipped"]["kv_routing"]  # a lever that cannot act keeps its own reason
    forced = api.predict("gb300-nvl72", "deepseek-r1", "mlperf-deepseek-r1-server", 72, round="v6.0", enable=["mtp"])
    assert "mtp" not in forced.to_dict()["skipped"] and forced.config["mtp_depth"] > 0
    from rich.console import Console

    from infersim.report import prediction_tables

    console = Console(record=True, width=200)
    for t in prediction_tables(d):
        console.print(t)
    text = console.export_text()
    assert "not used: mtp" in text and "not used: disagg" in text and "does not run it" in text


def _brute_closest(pred):
    """The smallest worst p99/limit ratio over every latency-rejected point of every variant."""
    from infersim.errors import Reason
    from infersim.grid import latency_limits

    limits = latency_limits(pred.inputs.scenario)
    best = np.inf
    for res in pred.results:
        for i, j in zip(*np.nonzero(~res.ok)):
            code = Reason(int(res.reason[i, j]))
            if code not in {c for c, _, _ in limits}:
                continue
            r = {c: float(np.broadcast_to(getattr(res.serving, key), res.ok.shape)[i, j]) / lim for c, key, lim in limits}
            if np.isfinite(r[code]):  # the rejecting limit's own figure; others only where evaluated
                best = min(best, max(v for v in r.values() if np.isfinite(v)))
    return best


def test_infeasible_prediction_says_how_close_the_best_point_came():
    """Pinned to a layout and batch whose p99 TPOT breaks the limit, the prediction names that
    point, the limit it misses and by how much; the figure is the evaluated p99 itself and the
    smallest miss over every latency-rejected point of every variant."""
    pred = infersim.predict("b300", "deepseek-r1", "mlperf-deepseek-r1-interactive", 8, round="v6.0",
                            tp=8, ep=8, dp=8, batch=55)
    assert not pred.feasible
    near = pred.breakdown["closest"]
    assert (near["tp"], near["ep"], near["dp"], near["batch"]) == (8, 8, 8, 55.0)
    assert near["limit"] == "tpot_p99" and near["limit_s"] == pytest.approx(0.015)
    assert near["value_s"] > near["limit_s"] and near["over_pct"] == pytest.approx(100 * (near["value_s"] / 0.015 - 1))
    assert near["value_s"] / near["limit_s"] == pytest.approx(_brute_closest(pred), rel=1e-12)
    assert "closest: tp 8 · pp 1 · ep 8 · dp 8, batch 55 per instance (" in pred.reason
    assert f"{near['value_s'] * 1e3:,.1f} ms against the 15.0 ms limit" in pred.reason
    with pytest.raises(infersim.InfeasibleError, match="closest: "):
        infersim.predict("b300", "deepseek-r1", "mlperf-deepseek-r1-interactive", 8, round="v6.0",
                         tp=8, ep=8, dp=8, batch=55, raise_infeasible=True)


def test_closest_point_of_a_disaggregated_search_is_its_decode_workers():
    """Disaggregated points rejected by p99 TPOT carry no TTFT (the prefill pool is not sized past
    the failing check): the TPOT figure still places them, named as the decode workers' layout."""
    pred = infersim.predict("gb300-nvl72", "deepseek-r1", "mlperf-deepseek-r1-interactive", 72, round="v6.0",
                            enable=["disagg"], disable=["wide_ep"], batch=300)
    assert not pred.feasible
    near = pred.breakdown["closest"]
    assert near["disaggregated"] and near["limit"] == "tpot_p99" and near["batch"] == 300.0
    assert np.isfinite(near["value_s"]) and near["value_s"] > near["limit_s"]
    assert near["value_s"] / near["limit_s"] == pytest.approx(_brute_closest(pred), rel=1e-12)
    assert "closest: decode workers tp " in pred.reason and "per decode worker (" in pred.reason


def test_no_closest_point_where_no_latency_limit_rejected_anything():
    """Weights that fit nowhere: no point reached the latency checks, so nothing is named."""
    from infersim.infeasible import closest_to_limits

    pred = infersim.predict("l40s", "llama3.1-405b", "mlperf-llama3.1-405b-server", 1)
    assert not pred.feasible and "closest" not in pred.breakdown and "closest" not in pred.reason
    assert closest_to_limits(pred.results, pred.inputs.scenario) is None


@pytest.mark.parametrize("case", [
    ("h100-sxm", "llama2-70b", "mlperf-llama2-70b-server", 8, "v5.1"),  # dense, Server, no attention DP
    ("b200", "deepseek-r1", "mlperf-deepseek-r1-server", 8, "v6.0"),  # attention DP: the gated engine
    ("b200", "deepseek-r1", "mlperf-deepseek-r1-offline", 8, "v6.0"),  # Offline with the gate walk
])
def test_prediction_grid_prices_only_the_points_that_fit(case):
    """``api.predict`` runs the serving model only at the [layout, batch] points that fit in memory
    (``search.evaluate(fit_points=True)``): there every metric equals the full grid's to the last
    bits (numpy's vectorized transcendentals may round a contiguous flat axis and a broadcast grid
    one unit apart: 1 of 380 points of the dense case is 1 ulp off), the reasons over the whole
    grid are the full grid's (the runners-up read their next-batch reason there), and the best point
    is the same."""
    from infersim import search
    from infersim.serving import WorkloadStats

    hw, model, scenario, n, rnd = case
    q = Query.build(hw, model, scenario, n, round=rnd)
    base = api.base_plan(q.inputs, q.software, q.layout, q.accelerators)
    stats = WorkloadStats.from_workload(q.inputs.scenario.workload, q.inputs.model)
    pruned_somewhere = False
    for transforms in api.selection(q).variants():
        plan = opt.apply_all(base, transforms)
        full = search.evaluate(plan, q.inputs.scenario, n, stats, price_per_hour=q.price)
        cut = search.evaluate(plan, q.inputs.scenario, n, stats, price_per_hour=q.price, fit_points=True)
        fits = full.ok_capacity
        pruned_somewhere |= bool((~fits).any())
        np.testing.assert_array_equal(cut.ok, full.ok)
        np.testing.assert_array_equal(np.broadcast_to(cut.reason, cut.ok.shape), np.broadcast_to(full.reason, full.ok.shape))
        for name, values in full.metrics.items():
            np.testing.assert_allclose(cut.metrics[name][fits], values[fits], rtol=1e-13, atol=0, err_msg=name)
        assert cut.reasons() == full.reasons()
        assert cut.best_index() == full.best_index()
    assert pruned_somewhere  # the case exercises the flat evaluation
