"""Ablation: which lever gives how much.

``waterfall``: from a baseline with no optimizations (same software maturity), add the toggles
one at a time in a fixed order and record tokens/s per accelerator and $/M tokens after each;
``leave_one_out``: from everything on, remove one toggle at a time. ``round_waterfall``: from
round A's preset to round B's — first B's kernel maturity, then each optimization B adds.
Every step is a full search (layout, batch, MTP depth), so a lever's gain includes the
re-optimisation it allows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import optimizations as opt
from .api import Inputs, Prediction, context, load_inputs, predict, recipe_off_reason
from .optimizations.presets import LATEST, PresetSpec, load_preset, resolve_round
from .query import limits_dict

ORDER = tuple(sorted(opt.REGISTRY, key=lambda k: opt.REGISTRY[k].rank))
"""Order in which the waterfall adds optimizations (each transform's ``rank``)."""


@dataclass
class Ablation:
    """Waterfall rows, leave-one-out rows, and the levers skipped (kind → why they cannot act)."""

    rows: list[dict]
    leave_one_out: list[dict]
    skipped: dict[str, str]
    limits: dict | None = None
    """The latency limits every step is searched under (``query.limits_dict``; None: Offline)."""

    def to_dict(self) -> dict[str, Any]:
        return {"waterfall": self.rows, "leave_one_out": self.leave_one_out, "skipped": self.skipped,
                "limits": self.limits}


@dataclass
class Step:
    label: str
    enabled: tuple[str, ...]
    prediction: Prediction

    def row(self, previous: "Step | None") -> dict[str, Any]:
        d = self.prediction.to_dict()
        per = d["tokens_per_s_per_accelerator"] if self.prediction.feasible else 0.0
        prev = previous.prediction.metrics.get("tokens_per_s_per_accelerator", 0.0) if previous else None
        return {"step": self.label, "tokens_per_s_per_accelerator": per,
                "gain": (per / prev) if prev else None,
                "usd_per_million_tokens": d.get("usd_per_million_tokens"),
                "ttft_s": d.get("ttft_s"), "tpot_s": d.get("tpot_s"), "feasible": self.prediction.feasible,
                "config": {k: d["config"].get(k) for k in ("tp", "pp", "ep", "dp", "batch", "mtp_depth", "disaggregated")}}


def _run(inputs: Inputs, n: int | None, preset: PresetSpec, on: tuple[str, ...], params: dict) -> Prediction:
    """The preset's software limited to the levers ``on``: a lever the preset offers as a choice
    stays a choice (the search may leave it off and searches its variants, e.g. MTP depth), as in
    ``infersim run``; a lever the preset lacks (``--lever``) is forced on with ``params``."""
    step = preset.model_copy(update={"optimizations": [e for e in preset.optimizations if e["kind"] in on],
                                     "choices": [e for e in preset.choices if e["kind"] in on]})
    in_preset = {e["kind"] for e in list(preset.optimizations) + list(preset.choices)}
    extra = [k for k in on if k not in in_preset]
    off = [k for k in opt.REGISTRY if k not in on]
    return predict(None, None, None, n, inputs=inputs, preset=step, enable=extra, disable=off,
                   params={k: params[k] for k in extra if params.get(k)})


def _levers(preset: PresetSpec, inputs: Inputs, skipped: dict[str, str] | None = None) -> dict[str, dict]:
    """Optimizations of a preset (applied and choices) with their parameters, keeping only those
    that can act on this system; the others go to ``skipped`` with the transform's reason."""
    ctx = context(inputs)
    found = {}
    offered = {e["kind"] for e in preset.choices}
    for e in list(preset.optimizations) + list(preset.choices):
        params = {k: v for k, v in e.items() if k != "kind"}
        why = opt.make(e["kind"], params).skip_reason(ctx, as_choice=e["kind"] in offered)
        if why is None:
            found[e["kind"]] = params
        elif skipped is not None:
            skipped[e["kind"]] = why
    return found


def waterfall(hardware, model, scenario, accelerators=None, *, round: str | None = None,
              levers: list[str] | None = None, isl=None, osl=None, slo=None) -> Ablation:
    """Cumulative waterfall and leave-one-out rows for the round's optimizations (or ``levers``);
    ``slo``: latency limits replacing the scenario's (``query.apply_slo``)."""
    inputs = load_inputs(hardware, model, scenario, isl=isl, osl=osl, slo=slo)
    preset = load_preset(round or LATEST)
    skipped: dict[str, str] = {}
    params = _levers(preset, inputs, skipped)
    for k in levers or []:
        if k not in opt.REGISTRY:
            from .errors import SpecError

            raise SpecError(f"unknown optimization '{k}' (known: {', '.join(sorted(opt.REGISTRY))})")
        why = opt.make(k, params.get(k, {})).skip_reason(context(inputs))
        if why is not None:
            skipped[k] = why
    chosen = [k for k in ORDER if k in (levers or list(params)) and k not in skipped]
    steps = [Step("baseline (no optimizations)", (), _run(inputs, accelerators, preset, (), params))]
    on: tuple[str, ...] = ()
    for k in chosen:
        on = on + (k,)
        steps.append(Step(f"+ {k}", on, _run(inputs, accelerators, preset, on, params)))
    rows = [s.row(steps[i - 1] if i else None) for i, s in enumerate(steps)]
    full = steps[-1]
    loo = []
    for k in chosen:
        rest = tuple(x for x in chosen if x != k)
        pred = _run(inputs, accelerators, preset, rest, params)
        r = Step(f"all − {k}", rest, pred).row(None)
        f = full.prediction.metrics.get("tokens_per_s_per_accelerator", 0.0)
        r["gain"] = (f / r["tokens_per_s_per_accelerator"]) if r["tokens_per_s_per_accelerator"] else None
        loo.append(r)
    return Ablation(rows, loo, skipped, limits_dict(inputs.scenario))


MATURITY_FIELDS = ("kernel_efficiency", "moe_kernel_efficiency", "host_overhead_scale")
"""A round preset's software-maturity factors (the first step of a round waterfall)."""


def round_waterfall(hardware, model, scenario, accelerators=None, *, from_round: str, to_round: str,
                    slo=None) -> Ablation:
    """From round A's software to round B's: maturity first, then each optimization B adds or
    retunes that can act on this system (the others are listed as skipped, with the reason)."""
    inputs = load_inputs(hardware, model, scenario, slo=slo)
    a, b = load_preset(from_round), load_preset(to_round)
    skipped: dict[str, str] = {}
    pa, pb = _levers(a, inputs, skipped), _levers(b, inputs, skipped)
    # a lever round B offers that B's recipe for this model, scenario and system does not run (its
    # engine block's ``disable``) would only add a flat step: it is listed as skipped instead
    for k in b.recipe_for(inputs.model_id, getattr(inputs.scenario, "kind", "offline"), inputs.hardware_id).disable:
        if k in pb and k not in pa:
            del pb[k]
            skipped[k] = recipe_off_reason(resolve_round(to_round), inputs, k)
    on_a = tuple(k for k in ORDER if k in pa)
    at = lambda preset: predict(None, None, None, accelerators, inputs=inputs, preset=preset)  # noqa: E731
    steps = [Step(f"{resolve_round(from_round)} software", on_a, at(a))]
    mature = a.model_copy(update={f: getattr(b, f) for f in MATURITY_FIELDS})
    steps.append(Step(f"+ {resolve_round(to_round)} kernel maturity and host overhead", on_a, at(mature)))
    if b.engine != a.engine:
        mature = mature.model_copy(update={"engine": b.engine})
        steps.append(Step(f"+ {resolve_round(to_round)} engine settings (batch and token limits, graphs, gate, streaming)",
                          on_a, at(mature)))
    applied = {e["kind"]: e for e in a.optimizations}
    applied.update({e["kind"]: e for e in b.optimizations})
    b_choices = {e["kind"]: e for e in b.choices}
    on, step = on_a, mature
    for k in ORDER:
        if k in pb and (k not in pa or pb[k] != pa[k]):
            on = tuple(x for x in ORDER if x in set(on) | {k})
            # each step is round B's software limited to the levers turned on so far: a lever that
            # B offers as a choice stays a choice (the search may leave it off), as in B itself
            step = mature.model_copy(update={
                "optimizations": [applied[x] for x in on if x in applied and x not in b_choices],
                "choices": [b_choices[x] for x in on if x in b_choices]})
            label = f"+ {k}" if k not in pa else f"~ {k} ({', '.join(f'{p}={v}' for p, v in pb[k].items())})"
            steps.append(Step(label, on, at(step)))
    same = all(getattr(step, f) == getattr(b, f) for f in MATURITY_FIELDS + ("engine", "optimizations", "choices"))
    steps.append(Step(f"{resolve_round(to_round)} software (search picks the choices)", tuple(pb),
                      steps[-1].prediction if same else at(b)))
    return Ablation([s.row(steps[i - 1] if i else None) for i, s in enumerate(steps)], [], skipped,
                    limits_dict(inputs.scenario))


def plot(rows: list[dict], path, title: str) -> None:
    """Waterfall chart of tokens/s per accelerator per step, written atomically to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .report import save_figure

    vals = [r["tokens_per_s_per_accelerator"] for r in rows]
    labels = [r["step"] for r in rows]
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(rows)), 4.5), dpi=120)
    prev = 0.0
    for i, v in enumerate(vals):
        if i == 0 or i == len(vals) - 1 and labels[i].endswith("choices)"):
            ax.bar(i, v, color="#4c72b0")
        else:
            ax.bar(i, v - prev, bottom=prev, color="#55a868" if v >= prev else "#c44e52")
        ax.text(i, v, f"{v:,.0f}", ha="center", va="bottom", fontsize=7)
        prev = v
    ax.set_ylim(0, max(vals + [1.0]) * 1.12)  # room for the value labels
    ax.set_xticks(range(len(vals)))
    ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("output tokens/s per accelerator")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    save_figure(fig, path)
