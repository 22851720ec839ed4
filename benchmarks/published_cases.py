"""Out-of-sample check: infersim vs published NON-MLPerf measurements (data/published_cases.csv).

The cases are vendor and framework blog points, a paper's baseline and InferenceX dashboard
ratios, each with the conditions its source states (shared/reference/effects.md sections 0-7).
infersim's free parameters are fitted on MLPerf rows only; these rows are a held-out test and must
never be used for fitting.

Per usable case the script builds an offline scenario in code (the case's ISL/OSL and weight
precision), fixes what the source fixes (accelerators, batch, tp/ep/dp, MTP depth and its published
accepted length, the round preset) and leaves the rest to infersim's search, through the public API:

- ``tokens_per_s_per_user`` at a fixed batch (latency points): the fastest per-user rate over the
  evaluated layouts (``infersim.evaluate``), i.e. the min-latency layout on the stated GPUs;
- ``tokens_per_s_per_gpu`` at a fixed batch and layout: ``infersim.predict``;
- ``decode_tokens_per_s_per_gpu`` (decode nodes of a prefill/decode-disaggregated deployment, the
  prefill nodes not counted): the decode worker's rate at the fixed layout and batch, from
  ``infersim.evaluate`` with ``disagg`` (see ``decode_pool_rate``);
- ``input_tokens_per_s_per_node`` (prefill points, OSL 1): ``predict``'s requests/s x ISL per
  8-GPU node;
- ``tokens_per_s_per_gpu`` at a per-user rate X (``condition = per_user_rate``): the Pareto frontier
  of ``predict`` (``infersim.frontier_points``) read at X tok/s/user, linearly interpolated between
  the two frontier points around X as the InferenceX pages interpolate between measured points; a
  rate beyond the frontier predicts 0 (an error of -100 %, counted as a miss, not dropped);
- ``ratio_tokens_per_s_per_gpu``: the same read on ``hardware`` over ``ref_hardware`` (0, i.e.
  -100 %, when either side cannot reach X).

MTP acceptance: a case's published mean accepted length L at depth d becomes d equal conditional
acceptances p with 1 + p + ... + p^d = L (the step cost depends on L only).

CSV columns (data/published_cases.csv): case_id; source_key and source_url (effects.md's short key
and address); hardware, model (bundled profile IDs); accelerators; isl, osl (tokens); weights
(precision); round (the preset: v5.1 for 2025 sources, v6.0 for the undated nightly InferenceX
data); tp, ep, dp (fixed layout axes, empty = searched); batch (decode sequences per instance, empty
= searched); mtp_depth, mtp_accept_len; enable, disable (optimization kinds, ';'-separated);
params (KIND.PARAM=VALUE, ';'-separated); engine (engine settings per attention rank, KEY=VALUE,
e.g. max_num_tokens; on top of the round's engine defaults, without the MLPerf recipes' per-model
overrides, see ``case_preset``); condition, condition_value (what the source fixes: batch,
batch_per_rank, per_user_rate in tok/s/user, tokens_per_device); metric, value (as published);
ref_hardware, ref_accelerators (ratio rows); layout_notes; assumed (conditions the source does not
state, the value used and why); usable (yes/no) and reason (why not).

    python benchmarks/published_cases.py [--data FILE] [--round vX.Y] [--hw-set FIELD=VALUE]... [--json FILE]

Prints one row per case (predicted, published, signed error %), the unusable cases with their
reasons, median and p90 absolute error overall and by source, and last one line
``median X % p90 Y % over N cases``.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parent.parent / "data" / "published_cases.csv"
GPUS_PER_NODE = 8
"""Accelerators per node in the per-node metrics (SGL-EP and DS6 report 8-GPU HGX nodes)."""

METRICS = ("tokens_per_s_per_user", "tokens_per_s_per_gpu", "decode_tokens_per_s_per_gpu", "input_tokens_per_s_per_node",
           "ratio_tokens_per_s_per_gpu")
"""Metrics the benchmark predicts; rows with any other metric must be unusable."""
CONDITIONS = ("batch", "batch_per_rank", "per_user_rate", "tokens_per_device")
"""Conditions a usable row may state."""


def load_cases(path: Path = DATA) -> list[dict[str, str]]:
    """Rows of the case CSV ('#' lines are comments)."""
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))


def _int(text: str) -> int | None:
    return int(text) if text.strip() else None


def _list(text: str) -> list[str]:
    return [t.strip() for t in text.split(";") if t.strip()]


def acceptance_for(depth: int, accept_len: float) -> list[float]:
    """d equal conditional acceptances p with 1 + p + ... + p^d = accept_len (bisection)."""
    if not 1.0 <= accept_len <= depth + 1:
        raise ValueError(f"accepted length {accept_len} outside [1, {depth + 1}] at depth {depth}")
    lo, hi = 0.0, 1.0
    for _ in range(60):
        p = 0.5 * (lo + hi)
        if sum(p ** k for k in range(depth + 1)) < accept_len:
            lo = p
        else:
            hi = p
    return [0.5 * (lo + hi)] * depth


def case_preset(row: dict[str, str]):
    """The row's round preset with the engine settings of a plain deployment: the MLPerf recipes'
    per-model overrides (batch caps, captured graph sizes, token budgets of NVIDIA's submissions)
    are dropped, the engine defaults kept, and the row's ``engine`` settings (what its source
    states, e.g. SGL-EP's 16k prompt tokens per GPU) applied on top."""
    from infersim.optimizations.presets import EngineOverride, load_preset

    preset = load_preset(row["round"])
    if preset.engine is None:
        return preset
    default = preset.engine.default.model_dump(exclude_none=True)
    for item in _list(row["engine"]):
        key, value = item.split("=")
        default[key] = int(value)
    engine = preset.engine.model_copy(update={"models": {}, "default": EngineOverride(**default)})
    return preset.model_copy(update={"engine": engine})


def query_kwargs(row: dict[str, str]) -> dict:
    """``infersim.Query.build`` keyword arguments for a row (besides hardware and accelerators)."""
    from infersim.specs.scenario import OfflineScenario

    scenario = OfflineScenario(
        name=f"published case {row['case_id']}", kind="offline",
        source=[f"data/published_cases.csv {row['case_id']} ({row['source_key']})"],
        workload={"isl": {"mean": float(row["isl"])}, "osl": {"mean": float(row["osl"])}},
        precision={"weights": row["weights"]})
    params: dict[str, dict] = {}
    for item in _list(row["params"]):
        key, value = item.split("=")
        kind, name = key.split(".")
        params.setdefault(kind, {})[name] = float(value) if "." in value else int(value)
    enable, disable = _list(row["enable"]), _list(row["disable"])
    depth = _int(row["mtp_depth"]) or 0
    if depth:
        params.setdefault("mtp", {}).update(depth=depth, acceptance=acceptance_for(depth, float(row["mtp_accept_len"])))
    batch = _int(row["batch"])
    return dict(model=row["model"], scenario=scenario, round=row["round"], preset=case_preset(row), tp=_int(row["tp"]), ep=_int(row["ep"]),
                dp=_int(row["dp"]), batch=float(batch) if batch else None, enable=enable, disable=disable,
                params=params)


def _diagnose(pred) -> str:
    """Layout, batch, host-overhead share and the largest operator of a prediction's step."""
    import infersim

    c = pred.config
    rows = infersim.explain(pred)
    over = next((r["share"] for r in rows if r["kind"] == "overhead"), 0.0)
    top = next((r for r in rows if r["kind"] != "overhead"), None)
    top_text = f"{top['op']} {top['bound'][:4]} {top['share']:.0%}" if top else "-"
    return (f"tp{c['tp']} ep{c['ep']} dp{c['dp']} pp{c['pp']} B={c['batch']:g} L={c['tokens_per_step']:.2f} "
            f"host {over:.0%}; top {top_text}")


def _fixed(kwargs: dict, config: dict) -> dict:
    return {**kwargs, **{k: int(config[k]) for k in ("tp", "ep", "dp", "pp")}, "batch": float(config["batch"])}


def per_user_at_batch(row, kwargs) -> tuple[float, str]:
    """Fastest tok/s/user over the evaluated layouts at the row's batch, and its diagnosis."""
    import infersim

    n = int(row["accelerators"])
    query = infersim.Query.build(row["hardware"], accelerators=n, **kwargs)
    best = None
    for res in infersim.evaluate(query):
        u = np.where(res.ok, np.broadcast_to(res.metrics["tokens_per_s_per_user"], res.ok.shape), -np.inf)
        i, j = np.unravel_index(int(np.argmax(u)), u.shape)
        if np.isfinite(u[i, j]) and (best is None or u[i, j] > best[0]):
            best = (float(u[i, j]), res.config_at(i, j))
    if best is None:
        return 0.0, "infeasible"
    pred = infersim.predict(row["hardware"], accelerators=n, **_fixed(kwargs, best[1]))
    return best[0], _diagnose(pred)


NO_LIMIT = {"ttft_ms": 1e7, "tpot_ms": 1e6}
"""Latency limits that bind nothing (the decode-pool cases fix the batch instead)."""


def decode_pool_rate(row, kwargs) -> tuple[float, str]:
    """Output tok/s per GPU of a disaggregated deployment's decode worker at the row's layout and
    batch: the decode-only step (TPOT of infersim's disaggregated decode workers) over a server
    scenario whose limits bind nothing. The source counts the decode nodes only; the query gets
    twice as many accelerators so that a prefill pool exists beside one decode worker (the
    prefill pool does not enter the decode step)."""
    import infersim
    from infersim.specs.scenario import ServerScenario

    off = kwargs["scenario"]
    scenario = ServerScenario(name=off.name, kind="server", source=off.source, workload=off.workload,
                              precision=off.precision, slo=NO_LIMIT)
    kwargs = {**kwargs, "scenario": scenario, "enable": [*kwargs["enable"], "disagg"], "pp": 1}
    n = int(row["accelerators"])
    query = infersim.Query.build(row["hardware"], accelerators=2 * n, **kwargs)
    for res in infersim.evaluate(query):
        if "disagg" not in res.plan.applied:
            continue
        ok = res.ok[0, 0]
        per_user = float(np.broadcast_to(res.metrics["tokens_per_s_per_user"], res.ok.shape)[0, 0])
        c = res.config_at(0, 0)
        if not ok:
            return 0.0, f"infeasible decode worker: tp{c['tp']} ep{c['ep']} dp{c['dp']} B={c['batch']:g}"
        return (per_user * c["batch"] / (c["tp"] * c["pp"]),
                f"decode worker tp{c['tp']} ep{c['ep']} dp{c['dp']} B={c['batch']:g} L={c['tokens_per_step']:.2f} "
                f"step {1e3 * c['tokens_per_step'] / per_user:.1f} ms")
    return 0.0, "no disaggregated variant"


def _label(hardware) -> str:
    return hardware if isinstance(hardware, str) else hardware.name


def _frontier_at(hardware: str, accelerators: int, kwargs: dict, rate: float) -> tuple[float, str]:
    """tok/s/GPU on the Pareto frontier at ``rate`` tok/s/user (linear between frontier points)."""
    import infersim

    pred = infersim.predict(hardware, accelerators=accelerators, **kwargs)
    pts = sorted((p["tokens_per_s_per_user"], p["tokens_per_s_per_accelerator"], p) for p in infersim.frontier_points(pred))
    if not pts or pts[-1][0] < rate:
        top = f"max {pts[-1][0]:.0f} tok/s/user" if pts else "no point"
        return 0.0, f"{_label(hardware)}x{accelerators}: unreachable ({top})"
    k = next(k for k, p in enumerate(pts) if p[0] >= rate)
    u1, a1, p1 = pts[k]
    if k == 0:
        value = a1
    else:
        u0, a0, _ = pts[k - 1]
        value = a0 + (a1 - a0) * (rate - u0) / (u1 - u0)
    return value, (f"{_label(hardware)}x{accelerators}: tp{p1['tp']} ep{p1['ep']} dp{p1['dp']} B={p1['batch']:g}"
                   f"{' mtp' + str(p1['mtp_depth']) if p1['mtp_depth'] else ''}{' disagg' if p1['disaggregated'] else ''}")


def predict_case(row: dict[str, str]) -> tuple[float, str]:
    """(predicted value in the row's metric, a short diagnosis)."""
    import infersim

    kwargs = query_kwargs(row)
    metric, n = row["metric"], int(row["accelerators"])
    if metric == "tokens_per_s_per_user":
        return per_user_at_batch(row, kwargs)
    if metric == "decode_tokens_per_s_per_gpu":
        return decode_pool_rate(row, kwargs)
    if row["condition"] == "per_user_rate":
        rate = float(row["condition_value"])
        value, why = _frontier_at(row["hardware"], n, kwargs, rate)
        if metric == "tokens_per_s_per_gpu":
            return value, why
        ref, why_ref = _frontier_at(row["ref_hardware"], int(row["ref_accelerators"]), kwargs, rate)
        ratio = value / ref if value > 0 and ref > 0 else 0.0  # either side unreachable: a miss
        return ratio, f"{value:.0f} / {ref:.0f} tok/s/GPU; {why}; {why_ref}"
    pred = infersim.predict(row["hardware"], accelerators=n, **kwargs)
    if not pred.feasible:
        return 0.0, f"infeasible: {pred.reason}"
    m = pred.to_dict()
    if metric == "tokens_per_s_per_gpu":
        return float(m["tokens_per_s_per_accelerator"]), _diagnose(pred)
    if metric == "input_tokens_per_s_per_node":
        rate = float(m["tokens_per_s"]) / float(row["osl"])
        return rate * float(row["isl"]) / (n / GPUS_PER_NODE), _diagnose(pred)
    raise ValueError(f"{row['case_id']}: metric {metric!r} has no prediction")


def with_hardware_settings(row: dict, settings: list[str]) -> dict:
    """The row with its hardware (and ref_hardware) profiles loaded and ``FIELD.PATH=VALUE``
    settings applied (``--hw-set``: a what-if on every case's hardware, never written anywhere)."""
    from infersim.specs import catalog

    def load(profile_id):
        spec = catalog.load("hardware", profile_id)
        for item in settings:
            path, value = item.split("=")
            *parents, leaf = path.split(".")
            chain = [spec]
            for name in parents:
                chain.append(getattr(chain[-1], name))
            new = chain[-1].model_copy(update={leaf: float(value)})
            for parent, name in zip(reversed(chain[:-1]), reversed(parents)):
                new = parent.model_copy(update={name: new})
            spec = type(spec).model_validate(new.model_dump())
        return spec

    out = {**row, "hardware": load(row["hardware"])}
    if row["ref_hardware"]:
        out["ref_hardware"] = load(row["ref_hardware"])
    return out


def _summary(errors: list[float]) -> tuple[float, float]:
    a = np.abs(np.asarray(errors, dtype=float))
    return float(np.median(a)), float(np.percentile(a, 90))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA, help="case CSV (default: the bundled data/published_cases.csv)")
    ap.add_argument("--round", default=None, help="run every case with this round's preset instead of its own")
    ap.add_argument("--hw-set", action="append", default=[], metavar="FIELD=VALUE",
                    help="what-if: set a hardware field on every case's profile, e.g. efficiency.gemm_m_half=32 (repeatable)")
    ap.add_argument("--json", type=Path, default=None, help="also write the per-case results here")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    try:
        rows = load_cases(args.data)
    except (OSError, csv.Error, UnicodeDecodeError) as e:
        print(f"error: {args.data}: {e}", file=sys.stderr)
        return 2
    usable = [r for r in rows if r["usable"] == "yes"]
    if args.hw_set and usable:
        try:
            with_hardware_settings(usable[0], args.hw_set)
        except Exception as e:  # noqa: BLE001 - a bad --hw-set is bad input
            print(f"error: --hw-set {args.hw_set}: {type(e).__name__}: {e}".splitlines()[0], file=sys.stderr)
            return 2
    out, by_source = [], {}
    print(f"{'case':32} {'metric':28} {'predicted':>10} {'published':>10} {'error':>8}  diagnosis")
    for row in usable:
        if args.round:
            row = {**row, "round": args.round}
        try:
            if args.hw_set:
                row = with_hardware_settings(row, args.hw_set)
            value, why = predict_case(row)
        except Exception as e:  # noqa: BLE001 - a case that cannot be predicted is reported, not dropped
            value, why = float("nan"), f"error: {type(e).__name__}: {e}"
        published = float(row["value"])
        err = (value - published) / published * 100.0 if np.isfinite(value) else float("nan")
        out.append({"case_id": row["case_id"], "source_key": row["source_key"], "metric": row["metric"],
                    "predicted": value, "published": published, "error_pct": err, "diagnosis": why})
        if np.isfinite(err):
            by_source.setdefault(row["source_key"], []).append(err)
        print(f"{row['case_id']:32} {row['metric']:28} {value:10.4g} {published:10.4g} {err:+7.1f}%  {why}")
    print(f"\nnot predicted ({len(rows) - len(usable)} cases, usable=no):")
    for row in rows:
        if row["usable"] != "yes":
            print(f"  {row['case_id']:32} {row['reason']}")
    errors = [e for errs in by_source.values() for e in errs]
    failed = len(usable) - len(errors)
    missed = sum(1 for o in out if o["predicted"] == 0.0)
    print("\nabsolute error by source:")
    for key in sorted(by_source):
        med, p90 = _summary(by_source[key])
        print(f"  {key:10} median {med:6.1f} %  p90 {p90:6.1f} %  ({len(by_source[key])} cases)")
    if failed:
        print(f"  {failed} usable case(s) could not be predicted (see 'error:' above)")
    if missed:
        print(f"  {missed} case(s) predicted 0 (rate unreachable or infeasible: -100 %, counted in the summary)")
    print(f"wall {time.perf_counter() - t0:.1f} s")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, allow_nan=True) + "\n", encoding="utf-8")
    if not errors:
        print("no case predicted")
        return 1
    med, p90 = _summary(errors)
    print(f"median {med:.1f} % p90 {p90:.1f} % over {len(errors)} cases")
    return 0


if __name__ == "__main__":
    sys.exit(main())
