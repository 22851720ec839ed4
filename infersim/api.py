"""The orchestrator: specs + round preset + toggles → plan variants → search → one prediction.

This is the scalar API edge: infeasibility becomes ``InfeasibleError`` only in ``predict`` when
asked (``raise_infeasible``); bad input is ``SpecError``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from . import optimizations as opt
from . import search, serving, tco
from .errors import InfeasibleError, Reason, SpecError
from .graph import Layout, Shape, resolve_formats
from .optimizations.presets import LATEST, PresetSpec, load_preset, resolve_round
from .plan import Plan, SearchSpace, Serving
from .serving import WorkloadStats
from .specs import catalog
from .specs.hardware import HardwareSpec
from .specs.model import ModelSpec
from .specs.scenario import LengthSpec

MOE_ONLY = ("attention_dp", "wide_ep")
"""Optimizations that only act on mixture-of-experts models."""


@dataclass(frozen=True)
class Inputs:
    """Resolved specs and their IDs."""

    hardware: HardwareSpec
    model: ModelSpec
    scenario: Any
    hardware_id: str
    model_id: str
    scenario_id: str


def load_inputs(hardware, model, scenario, *, isl: float | None = None, osl: float | None = None,
                trace=None) -> Inputs:
    """Resolve IDs/paths (or accept spec objects) and apply ISL/OSL or trace overrides."""
    def get(kind, x):
        if isinstance(x, (str, bytes)) or hasattr(x, "__fspath__"):
            return catalog.load(kind, x), catalog.profile_id(kind, x)
        return x, getattr(x, "name", kind)

    hw, hw_id = get("hardware", hardware)
    sc, sc_id = get("scenario", scenario)
    if model is None:
        if not getattr(sc, "model", None):
            raise SpecError("no --model given and the scenario names no default model")
        model = sc.model
    md, md_id = get("model", model)
    if trace is not None:
        from pathlib import Path

        from .specs.scenario import load_trace

        t_isl, t_osl = load_trace(Path(trace))
        sc = sc.model_copy(update={"workload": sc.workload.model_copy(update={"isl": t_isl, "osl": t_osl})})
    if isl is not None or osl is not None:
        wl = sc.workload
        if isl is not None:
            if not 0 < isl <= 10_000_000:
                raise SpecError(f"--isl must be in (0, 1e7] tokens (got {isl})")
            wl = wl.model_copy(update={"isl": LengthSpec(mean=isl)})
        if osl is not None:
            if not 0 < osl <= 10_000_000:
                raise SpecError(f"--osl must be in (0, 1e7] tokens (got {osl})")
            wl = wl.model_copy(update={"osl": LengthSpec(mean=osl)})
        sc = sc.model_copy(update={"workload": wl})
    return Inputs(hw, md, sc, hw_id, md_id, sc_id)


def default_accelerators(hw: HardwareSpec) -> int:
    """One scale-up domain, capped at 72 (8 for pods larger than a rack)."""
    d = hw.scale_up.domain_size
    return d if d <= 72 else 8


def base_plan(inputs: Inputs, *, preset: PresetSpec | None, layout: dict[str, int | None], batch: float | None) -> Plan:
    hw, sc = inputs.hardware, inputs.scenario
    fmt = resolve_formats(sc.precision, hw)
    fixed = {k: ((v,) if v is not None else None) for k, v in layout.items()}
    space = SearchSpace(tp=fixed.get("tp"), pp=fixed.get("pp"), ep=fixed.get("ep"), dp=fixed.get("dp"),
                        batch=(batch,) if batch is not None else None, max_batch=sc.max_batch)
    plan = Plan(hardware=hw, model=inputs.model, formats=fmt, search=space,
                serving=Serving(prefix_share=sc.workload.prefix_share_fraction))
    if preset is not None:
        plan = replace(plan, kernel_efficiency=preset.kernel_efficiency, moe_kernel_efficiency=preset.moe_kernel_efficiency,
                       host_overhead_scale=preset.host_overhead_scale)
    return plan


def parse_param_overrides(items: list[str]) -> dict[str, dict[str, Any]]:
    """'kind.param=value' strings → {kind: {param: value}} (values parsed as YAML scalars)."""
    import yaml

    out: dict[str, dict[str, Any]] = {}
    for item in items:
        if "=" not in item or "." not in item.split("=", 1)[0]:
            raise SpecError(f"--set expects KIND.PARAM=VALUE (got '{item}')")
        key, value = item.split("=", 1)
        kind, param = key.split(".", 1)
        out.setdefault(kind, {})[param] = yaml.safe_load(value)
    return out


def transform_sets(inputs: Inputs, preset: PresetSpec | None, enable: list[str], disable: list[str],
                   params: dict[str, dict[str, Any]]) -> list[list[opt.Transform]]:
    """Every combination of transforms to evaluate: forced ones plus each subset of choices."""
    for name in list(enable) + list(disable) + list(params):
        if name not in opt.REGISTRY:
            raise SpecError(f"unknown optimization '{name}' (known: {', '.join(sorted(opt.REGISTRY))})")
    both = set(enable) & set(disable)
    if both:
        raise SpecError(f"optimization(s) both enabled and disabled: {', '.join(sorted(both))}")
    forced: dict[str, dict] = {}
    choices: dict[str, dict] = {}
    if preset is not None:
        for entry in preset.optimizations:
            forced[entry["kind"]] = {k: v for k, v in entry.items() if k != "kind"}
        for entry in preset.choices:
            choices[entry["kind"]] = {k: v for k, v in entry.items() if k != "kind"}
    for entry in inputs.scenario.optimizations:
        data = entry.model_dump()
        kind = data.pop("kind")
        if kind not in opt.REGISTRY:
            raise SpecError(f"unknown optimization '{kind}' (known: {', '.join(sorted(opt.REGISTRY))})",
                            path="optimizations")
        forced[kind] = {**forced.get(kind, {}), **data}
        choices.pop(kind, None)
    for kind in enable:
        forced[kind] = {**choices.pop(kind, {}), **forced.get(kind, {})}
    for kind, p in params.items():
        if kind in forced:
            forced[kind] = {**forced[kind], **p}
        elif kind in choices:
            choices[kind] = {**choices[kind], **p}
        else:
            forced[kind] = dict(p)
    for kind in disable:  # last: a disabled optimization stays off whatever else asked for it
        forced.pop(kind, None)
        choices.pop(kind, None)
    if inputs.scenario.kind == "offline":
        choices.pop("disagg", None)  # no latency limit: one pool does the same work
    if inputs.model.mtp_layers == 0:
        choices.pop("mtp", None)  # a round's MTP needs trained draft heads; enable explicitly otherwise
    if inputs.scenario.workload.prefix_share_fraction == 0:
        choices.pop("kv_routing", None)  # neutral without shareable prefixes
    if not inputs.model.is_moe:
        for kind in MOE_ONLY:  # nothing to act on in a dense model
            forced.pop(kind, None)
            choices.pop(kind, None)
    base = [opt.make(k, v) for k, v in forced.items()]
    sets = []
    names = list(choices)
    for mask in itertools.product((False, True), repeat=len(names)):
        extra = []
        for on, name in zip(mask, names):
            if on:
                extra.append(opt.make(name, choices[name]))
        sets.append(base + extra)
    # MTP: the search also tries every shallower depth
    out = []
    for s in sets:
        mtps = [t for t in s if t.kind == "mtp" and t.enabled]
        if mtps and mtps[0].depth > 1 and mtps[0].acceptance is None:
            for d in range(1, mtps[0].depth + 1):
                out.append([t if t.kind != "mtp" else t.model_copy(update={"depth": d}) for t in s])
        else:
            out.append(s)
    return out


@dataclass
class Prediction:
    """One operating point (the best found) and how it was reached."""

    inputs: Inputs
    accelerators: int
    feasible: bool
    reason: str
    metrics: dict[str, float]
    config: dict[str, Any]
    breakdown: dict[str, Any]
    grid: search.GridResult | None = field(default=None, repr=False)
    plan: Plan | None = field(default=None, repr=False)
    grids: list = field(default_factory=list, repr=False)
    """Every evaluated (plan, grid) when asked with keep_grids (for the Pareto frontier)."""

    def to_dict(self) -> dict[str, Any]:
        m = self.metrics
        return {
            "hardware": self.inputs.hardware_id,
            "model": self.inputs.model_id,
            "scenario": self.inputs.scenario_id,
            "accelerators": self.accelerators,
            "feasible": self.feasible,
            "reason": self.reason,
            "tokens_per_s": m.get("tokens_per_s", 0.0),
            "tokens_per_s_per_accelerator": m.get("tokens_per_s_per_accelerator", 0.0),
            "tokens_per_s_per_user": m.get("tokens_per_s_per_user", 0.0),
            "ttft_s": m.get("ttft_s"),
            "tpot_s": m.get("tpot_s"),
            "ttft_mean_s": m.get("ttft_mean_s"),
            "tpot_mean_s": m.get("tpot_mean_s"),
            "requests_per_s": m.get("requests_per_s"),
            "usd_per_million_tokens": m.get("usd_per_million_tokens"),
            "usd_per_million_input_tokens": m.get("usd_per_million_input_tokens"),
            "config": self.config,
            "breakdown": self.breakdown,
        }


def _point(grid: search.GridResult, i: int, j: int, plan: Plan, inputs: Inputs, price: float, accelerators: int,
           stats: WorkloadStats):
    s = grid.serving
    lay = {k: int(v[i]) for k, v in grid.layouts.items()}
    size = lay["tp"] * lay["pp"]
    replicas = accelerators // size
    total = float(np.broadcast_to(grid.system_tokens_per_s, grid.ok.shape)[i, j])
    pick = lambda a: float(np.broadcast_to(a, grid.ok.shape)[i, j])  # noqa: E731
    tpot_mean = pick(s.tpot_mean)
    metrics = {
        "tokens_per_s": total,
        "tokens_per_s_per_accelerator": total / accelerators,
        "tokens_per_s_per_user": 1.0 / tpot_mean if tpot_mean > 0 else 0.0,
        "ttft_s": pick(s.ttft_p99), "tpot_s": pick(s.tpot_p99), "ttft_mean_s": pick(s.ttft_mean),
        "tpot_mean_s": tpot_mean, "requests_per_s": total / stats.osl_mean,
        "usd_per_million_tokens": float(tco.usd_per_million_tokens(price, accelerators, total)),
    }
    metrics["usd_per_million_input_tokens"] = float(tco.usd_per_million_tokens(
        price, accelerators, metrics["requests_per_s"] * stats.isl_mean))
    config = {**lay, "replicas": replicas, "batch": float(grid.batch[j]),
              "max_batch": float(grid.max_batch[i, j]), "weights": plan.formats.weights,
              "activations": plan.formats.activations, "kv_cache": plan.formats.kv_cache,
              "optimizations": list(plan.applied), "mtp_depth": plan.serving.draft_depth,
              "tokens_per_step": plan.serving.tokens_per_step, "disaggregated": plan.serving.disaggregated}
    config.update(getattr(grid, "extra_config", lambda i, j: {})(i, j))
    step = s.step
    kinds = {k: float(np.broadcast_to(v, grid.ok.shape)[i, j]) for k, v in step.by_kind.items()}
    total_t = pick(step.total)
    cb, mb = pick(step.compute_bound), pick(step.memory_bound)
    bound = max((("compute", cb), ("memory", mb), ("communication", kinds["comm"]), ("overhead", kinds["overhead"])),
                key=lambda kv: kv[1])[0]
    breakdown = {"step_s": total_t, "by_kind_s": kinds, "compute_bound_s": cb, "memory_bound_s": mb,
                 "bound": bound, "prefill_share": pick(s.prefill_share)}
    return metrics, config, breakdown


def predict(hardware, model, scenario, accelerators: int | None = None, *, round: str | None = None,
            isl: float | None = None, osl: float | None = None, trace=None, tp: int | None = None, ep: int | None = None,
            dp: int | None = None, pp: int | None = None, batch: float | None = None,
            enable: list[str] = (), disable: list[str] = (), params: dict | None = None,
            price_per_hour: float | None = None, raise_infeasible: bool = False,
            presets_dir=None, inputs: Inputs | None = None, preset: PresetSpec | None = None,
            keep_grids: bool = False) -> Prediction:
    """Best operating point for hardware × model × scenario on ``accelerators``.

    Unset layout arguments are searched; set ones are fixed. ``round`` selects a software preset
    (default: the latest).
    """
    inputs = inputs or load_inputs(hardware, model, scenario, isl=isl, osl=osl, trace=trace)
    hw = inputs.hardware
    n = int(accelerators) if accelerators is not None else default_accelerators(hw)
    if n < 1 or n > 1_000_000:
        raise SpecError(f"--accelerators must be in [1, 1e6] (got {n})")
    for name, v in (("tp", tp), ("ep", ep), ("dp", dp), ("pp", pp)):
        if v is not None and (v < 1 or v > n):
            raise SpecError(f"--{name} must be in [1, accelerators={n}] (got {v})")
    if batch is not None and not 1 <= batch <= 1e6:
        raise SpecError(f"--batch must be in [1, 1e6] sequences (got {batch})")
    if preset is None:
        preset = load_preset(round or LATEST) if presets_dir is None else load_preset(round, presets_dir)
    base = base_plan(inputs, preset=preset, layout={"tp": tp, "ep": ep, "dp": dp, "pp": pp}, batch=batch)
    price = price_per_hour if price_per_hour is not None else hw.price.usd_per_hour
    stats = WorkloadStats.from_workload(inputs.scenario.workload, inputs.model)
    best = None
    last_grid = None
    grids: list[tuple[Plan, search.GridResult]] = []
    for transforms in transform_sets(inputs, preset, list(enable), list(disable), params or {}):
        plan = opt.apply_all(base, transforms)
        if dp is not None and dp > 1:
            plan = replace(plan, search=replace(plan.search, attention_dp=True))
        grid = search.evaluate(plan, inputs.scenario, n, stats)
        last_grid = grid
        if keep_grids:
            grids.append((plan, grid))
        ij = grid.best_index()
        if ij is None:
            continue
        value = grid.per_accelerator[ij]
        if best is None or value > best[0] * (1 + 1e-9):
            best = (value, grid, plan, ij)
    if best is None:
        reasons = last_grid.reasons() if last_grid is not None else {}
        top = max(reasons.items(), key=lambda kv: kv[1])[0] if reasons else "NO_LAYOUT"
        msg = _infeasible_message(top, reasons, n)
        if raise_infeasible:
            raise InfeasibleError(msg, reasons)
        return Prediction(inputs, n, False, msg, {}, {"round": resolve_round(round)}, {"reasons": reasons},
                          grid=last_grid, plan=base, grids=grids)
    _, grid, plan, (i, j) = best
    metrics, config, breakdown = _point(grid, i, j, plan, inputs, price, n, stats)
    config["round"] = resolve_round(round)
    return Prediction(inputs, n, True, "", metrics, config, breakdown, grid=grid, plan=plan, grids=grids)


_EXPLAIN = {
    "MEMORY": "the model's weights do not fit in accelerator memory with any allowed layout",
    "KV_CAPACITY": "weights fit but not the KV cache of even the smallest batch",
    "DIVISIBILITY": "no allowed layout divides the heads/experts/accelerators",
    "SLO_TTFT": "no configuration meets the p99 TTFT limit",
    "SLO_TPOT": "no configuration meets the p99 TPOT limit",
    "SLO_E2E": "no configuration meets the p99 end-to-end limit",
    "SATURATED": "the offered load saturates every configuration",
    "BATCH_LIMIT": "the batch limit excludes every configuration",
    "NO_LAYOUT": "no layout fits this accelerator count",
}


def _infeasible_message(top: str, reasons: dict[str, int], n: int) -> str:
    detail = ", ".join(f"{k} {v}" for k, v in sorted(reasons.items(), key=lambda kv: -kv[1]))
    return f"nothing fits on {n} accelerators: {_EXPLAIN.get(top, top)} (rejected points: {detail or 'none'})"


def explain(pred: Prediction) -> list[dict[str, Any]]:
    """Per-operator times of the chosen point's engine step (one instance, one full step;
    offline steps include their share of prefill).

    Rows: op, kind, bound, time_s (summed over layers and pipeline stages), share of the step.
    """
    from .engine import step_cost

    if not pred.feasible or pred.plan is None:
        return []
    c = pred.config
    stats = WorkloadStats.from_workload(pred.inputs.scenario.workload, pred.inputs.model)
    layout = Layout(tp=c["tp"], pp=c["pp"], ep=c["ep"], dp=c["dp"])
    if pred.inputs.scenario.kind == "offline":  # offline steps carry the prefills that replace finished sequences
        shape = serving.offline_shape(pred.plan, layout, c["batch"], stats, c["replicas"])
    else:
        shape = Shape(decode_seqs=c["batch"], decode_q=1.0 + pred.plan.serving.draft_depth, decode_ctx=stats.context_mean)
    cost = step_cost(pred.plan, layout, shape, detail=True)
    total = float(cost.total)
    rows = [{"op": name, "kind": cost.op_info[name][0], "bound": cost.op_info[name][1], "time_s": float(t),
             "share": float(t) / total} for name, t in cost.by_op.items() if float(t) > 0]
    rows.sort(key=lambda r: -r["time_s"])
    overhead = float(cost.by_kind["overhead"])
    rows.append({"op": "launch + host overhead", "kind": "overhead", "bound": "overhead", "time_s": overhead,
                 "share": overhead / total})
    return rows


__all__ = ["predict", "explain", "load_inputs", "Prediction", "Inputs", "Reason"]
