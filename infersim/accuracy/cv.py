"""Cross-validation: the error on frontier rows the fit never saw.

Three fold kinds: leave one round out, leave one hardware out and leave one model out. Each
fold fits the parameters on the other rows, starting from the documented defaults (so no fold
starts from values fitted on its own test rows), and predicts the held-out frontier rows:

- a hardware the fold did not fit gets the fleet prior (``transfer_prior``), as new hardware would,
  or, where a fitted profile carries its GPU die (``kernels_as``), that profile's kernel efficiencies;
- a round the fold did not fit gets the geometric mean of its nearest fitted older and newer
  rounds' factors (one neighbour only: that neighbour's factors), which keeps the round order,
  times the round's documented factor over theirs where its preset documents a measured one
  (v6.0's CuTe DSL MoE kernels).

The uncalibrated error beside each figure uses the documented defaults throughout.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ..errors import SpecError
from .data import Row, as_rows, version_key
from .fit import (CV_MAX_NFEV, DEFAULT_PARAMETERS, FitRow, _vals, calibrate, die_root, fit_rows, hardware_defaults,
                  documented_round, round_defaults, round_sig, tie_root)
from .params import HARDWARE_RANGES, HOST_PARAMETERS, KERNEL_PARAMETERS, ROUND_FACTORS
from .progress import Progress
from .result import CalibrationResult
from .runner import Runner, runner_for
from .oppoints import load_class
from .summary import load_split, load_split_lines, stats

FOLD_KINDS: tuple[str, ...] = ("round", "hardware", "model")
"""Fold kinds: the row field held out."""

_FOLD_FIELD = {"round": "version", "hardware": "hardware", "model": "model"}

SCALE_PARAMETERS = ("compute_fraction", "memory_fraction", "kv_memory_fraction", "attention_fraction")
"""Fractions transferred as ratios to each hardware's own documented default; the others as values."""


def transfer_prior(result: CalibrationResult, hw_id: str, runner: Runner | None = None) -> dict[str, float]:
    """Efficiencies for hardware the fit did not cover: its die sibling's kernel efficiencies where
    a fitted profile carries the same GPU die, else the fleet's calibrated-to-default ratio.

    Notes
    -----
    Same die (``kernels_as``, in either direction, e.g. B300 and GB300 NVL72; failing that
    ``transfer_as``, the same die fitted separately, e.g. H200 and H100 SXM): the kernel
    efficiencies (``params.KERNEL_PARAMETERS``, fractions of the die's own peaks) are the fitted
    sibling's, the median where several are fitted, as calibrate would tie them; a sibling fitted
    separately (``transfer_as``) lends its fractions of peak (``SCALE_PARAMETERS``) as ratios to its
    own documented default, so a documented difference (MI325X's measured MAMF against MI300X's)
    carries over. Same host
    (``host_as``, e.g. GB200 and GB300 NVL72 on Grace): the per-step host cost
    (``params.HOST_PARAMETERS``) is the fitted sibling's; otherwise the fleet's.
    Otherwise, for a fraction p: p_new = p_default(hw) · median_h(p_fit(h) / p_default(h)) over
    the fitted hardware h, where p_default is the documented (spec-sheet) default, never a fitted
    value; clipped to the parameter's range. Other parameters (small-GEMM knee, step overhead) take
    the fleet median. Leave-one-hardware-out CV predicts the held-out hardware with this rule.
    """
    run = runner or Runner(result.presets_dir)
    names = sorted({n for v in result.hardware.values() for n in v})
    default = hardware_defaults(run, hw_id, names)
    die, host = die_root(run, hw_id), tie_root(run, hw_id, "host_as")
    siblings = [h for h in result.hardware if h != hw_id and die_root(run, h) == die]
    separate = not siblings
    if separate:  # the same die fitted separately (``transfer_as``)
        same = tie_root(run, die, "transfer_as")
        siblings = [h for h in result.hardware if h != hw_id and tie_root(run, die_root(run, h), "transfer_as") == same]
    hosts = [h for h in result.hardware if h != hw_id and tie_root(run, h, "host_as") == host]
    out = {}

    def scaled(name, pairs):  # this profile's default × the pairs' median calibrated-to-default ratio
        ratios = [val / result.defaults[f"{h}.{name}"] for h, val in pairs if result.defaults.get(f"{h}.{name}")]
        return default[name] * float(np.median(ratios)) if ratios else None

    for name in names:
        if not run.base_hardware(hw_id).has_efficiency(name):
            continue  # a GPU without FP4 tensor cores never streams block-scaled FP4 weights
        fitted = [(h, v[name]) for h, v in result.hardware.items() if name in v]
        same_die = [(h, v) for h, v in fitted if h in siblings]
        same_host = [v for h, v in fitted if h in hosts]
        value = None
        if same_die and name in KERNEL_PARAMETERS:
            # fitted separately, each profile against its own documented default (e.g. its own
            # measured MAMF), a fraction of peak carries over as the sibling's ratio
            if separate and name in SCALE_PARAMETERS:
                value = scaled(name, same_die)
            if value is None:
                value = float(np.median([v for _, v in same_die]))
        elif same_host and name in HOST_PARAMETERS:
            value = float(np.median(same_host))
        elif name in SCALE_PARAMETERS:
            value = scaled(name, fitted)
        if value is None:
            value = float(np.median([val for _, val in fitted]))
        rng = HARDWARE_RANGES[name]
        out[name] = round_sig(float(np.clip(value, rng.lower, rng.upper)))
    return out


def held_out_round(result: CalibrationResult, round_name: str, presets_dir=None) -> dict[str, float]:
    """Round factors for a round the fit did not fit (see the module notes): per factor, from the
    nearest older and newer rounds whose value of it was fitted (a factor a round holds by rule for
    want of rows, ``CalibrationResult.held_factors``, is no measurement of that round), times the
    round's documented factor over theirs where its own preset documents one (``documented_round``:
    v6.0's measured CuTe DSL MoE gain; 1 where they document the same)."""
    usable = {r: v for r, v in result.round_values.items() if r in result.presets or r == result.reference_round}
    if round_name in usable:
        return dict(usable[round_name])
    k = version_key(round_name)
    factors = tuple(ROUND_FACTORS)
    out = dict(result.round_values.get(round_name) or round_defaults(factors))
    names = {n for v in usable.values() for n in v}
    documented = {r: documented_round(factors, r, presets_dir) for r in [round_name, *usable]}
    own = documented[round_name]
    for n in names:
        have = [r for r in usable if n in usable[r] and n not in result.held_factors.get(r, ())]
        older = [r for r in have if version_key(r) < k]
        newer = [r for r in have if version_key(r) > k]
        picks = ([max(older, key=version_key)] if older else []) + ([min(newer, key=version_key)] if newer else [])
        if picks:
            out[n] = _geomean(usable[r][n] for r in picks)
            if own is not None and all(documented[r] is not None for r in picks):
                out[n] *= own[n] / _geomean(documented[r][n] for r in picks)
    return out


def _geomean(values) -> float:
    return float(math.exp(np.mean([math.log(v) for v in values])))


def _held_out(run: Runner, result: CalibrationResult, test: Sequence[FitRow], names: Sequence[str]) -> list[dict]:
    hw_vals: dict[str, dict[str, float]] = {}
    base_hw: dict[str, dict[str, float]] = {}
    rnd_vals: dict[str, dict[str, float]] = {}
    base_rnd: dict[str, dict[str, float]] = {}
    out = []
    for fr in test:
        h, r = fr.key.hardware, fr.key.preset
        if h not in hw_vals:
            base_hw[h] = hardware_defaults(run, h, names)
            hw_vals[h] = dict(result.hardware.get(h) or transfer_prior(result, h, run))
        if r not in rnd_vals:  # once per round, as per hardware above
            base_rnd[r] = round_defaults(tuple(ROUND_FACTORS), r, run.presets_dir)
            rnd_vals[r] = held_out_round(result, r, run.presets_dir)
        after = run.predict(fr.key, _vals(hw_vals[h]), _vals(rnd_vals[r]))
        before = run.predict(fr.key, _vals(base_hw[h]), _vals(base_rnd[r]))
        out.append({"row": fr.row, "predicted": after.value, "default": before.value, "reason": after.reason})
    return out


def _fold_stats(items: list[dict[str, Any]]) -> dict[str, Any]:
    ape = [abs(i["predicted"] / i["row"].tokens_per_s - 1) * 100 for i in items if i["predicted"] is not None]
    base = [abs(i["default"] / i["row"].tokens_per_s - 1) * 100 for i in items if i["default"] is not None]
    med, p90 = stats(ape)
    bmed, bp90 = stats(base)
    return {"rows": len(items), "n_failed": len(items) - len(ape), "median_ape": med, "p90_ape": p90,
            "uncalibrated_median_ape": bmed, "uncalibrated_p90_ape": bp90}


def _row_table(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each held-out row's prediction, for the error table behind a fold's figures (worst first)."""
    out = []
    for i in items:
        r = i["row"]
        err = None if i["predicted"] is None else 100 * (i["predicted"] / r.tokens_per_s - 1)
        load, share = load_class(r.version, r.columns.get("submitter", ""), r.columns.get("system", ""), r.model,
                                 r.scenario)
        out.append({"version": r.version, "hardware": r.hardware, "model": r.model, "scenario": r.scenario,
                    "accelerators": r.accelerators, "submitter": r.columns.get("submitter", ""),
                    "system": r.columns.get("system", ""), "line": r.line,
                    "published_tokens_per_s": r.tokens_per_s, "predicted_tokens_per_s": i["predicted"],
                    "error_pct": err, "reason": i["reason"], "load": load, "latency_limit_share": share})
    return sorted(out, key=lambda x: -abs(x["error_pct"]) if x["error_pct"] is not None else -math.inf)


def cross_validate(rows: Sequence[Row] | str | os.PathLike, hardware_ids: Iterable[str] | None = None, *,
                   folds: Sequence[str] = FOLD_KINDS, fit_rounds: bool = True, min_rows: int = 3,
                   max_nfev: int = CV_MAX_NFEV, progress: Progress | None = None, workers: int | None = None,
                   presets_dir: str | os.PathLike | None = None, runner: Runner | None = None,
                   **fit_kwargs) -> dict[str, Any]:
    """Held-out error: leave one round, one hardware and one model out.

    Parameters
    ----------
    rows : rows (or a CSV path); only frontier rows are fitted and tested.
    hardware_ids : test only rows of these hardware (default: all).
    folds : fold kinds, a subset of ``FOLD_KINDS``.
    max_nfev : optimizer evaluations per fold fit.
    **fit_kwargs : passed to :func:`calibrate` (``parameters``, ``prior_weight``, ``operating_points`` …);
        a fold fits only the operating points outside its held-out round, hardware or model.

    Returns
    -------
    dict with ``leave_one_round_out``, ``leave_one_hardware_out`` and/or
    ``leave_one_model_out``, each with pooled ``rows, n_failed, median_ape, p90_ape`` over all
    held-out frontier rows (and ``uncalibrated_*`` at the documented defaults), ``folds`` (per
    held-out value: its figures, the fit's row count and error, the values it fitted (``fitted``,
    per hardware and round) and its ``findings``), ``max_nfev``, ``seconds`` and ``held_out`` (each held-out row's published and
    predicted tokens/s and signed error, worst first). A hardware with fewer than ``min_rows``
    frontier rows is not held out on its own.
    """
    for kind in folds:
        if kind not in FOLD_KINDS:
            raise SpecError(f"unknown fold kind '{kind}' (expected {', '.join(FOLD_KINDS)})")
    rows = as_rows(rows)
    prog = progress or Progress()
    names = tuple(fit_kwargs.get("parameters") or DEFAULT_PARAMETERS)
    from .fit import _op_rows

    ops = _op_rows(fit_kwargs.pop("operating_points", None), presets_dir)
    everything, _ = fit_rows(rows, hardware_ids, presets_dir)
    with runner_for(runner, presets_dir, workers, len(everything) * 8) as run:
        out: dict[str, Any] = {}
        for kind in folds:
            t0 = time.perf_counter()
            attr = _FOLD_FIELD[kind]
            groups: dict[str, list[FitRow]] = {}
            for fr in everything:
                groups.setdefault(getattr(fr.row, attr), []).append(fr)
            order = sorted(groups, key=version_key) if kind == "round" else sorted(groups)
            fold_out, pooled = {}, []
            for name in order:
                test = groups[name]
                if kind == "hardware" and len(test) < min_rows:
                    continue
                train = [r for r in rows if getattr(r, attr) != name]
                res = calibrate(train, fit_rounds=fit_rounds, transfer=False, min_rows=min_rows, max_nfev=max_nfev,
                                operating_points=[o for o in ops if getattr(o, attr) != name],
                                presets_dir=presets_dir, runner=run, start="default", progress=prog,
                                phase=f"cv {kind}: leave out {name} ({len(test)} rows)", **fit_kwargs)
                items = _held_out(run, res, test, names)
                pooled += items
                fold_out[name] = {**_fold_stats(items), "fit_rows": res.rows, "fit_median_ape": res.after["median_ape"],
                                  "fit_seconds": res.seconds, "fitted": {**res.hardware, **res.presets},
                                  "findings": [f["text"] for f in res.findings], "termination": res.message,
                                  "stopped_by_budget": res.stopped_by_budget}
                prog.log(f"cv {kind}: {name}: held-out median APE {fold_out[name]['median_ape'] or 0:.1f} % "
                         f"({len(test)} rows)")
            table = _row_table(pooled)
            out[f"leave_one_{kind}_out"] = {**_fold_stats(pooled), "folds": fold_out, "max_nfev": max_nfev,
                                           "seconds": time.perf_counter() - t0, "held_out": table,
                                           "by_load": load_split([(t["load"], t["published_tokens_per_s"],
                                                                   t["predicted_tokens_per_s"]) for t in table])}
        return out


def format_cv(cv: dict[str, Any], worst_rows: int = 5) -> str:
    """A plain-text table of cross-validation results, with each fold kind's ``worst_rows`` worst held-out rows."""
    f = lambda x: "-" if x is None else f"{x:.1f}"  # noqa: E731
    lines = []
    for kind, block in cv.items():
        lines.append(f"{kind.replace('_', ' ')} (held-out frontier rows, max_nfev {block['max_nfev']}, "
                     f"{block['seconds']:.0f} s)")
        lines.append(f"  {'held out':<16}{'rows':>6}{'median APE %':>14}{'p90 APE %':>11}{'uncalibrated med %':>20}"
                     f"{'fit stopped by':>16}")
        for name, s in block["folds"].items():
            stop = "-" if "stopped_by_budget" not in s else "budget" if s["stopped_by_budget"] else "tolerance"
            lines.append(f"  {name:<16}{s['rows']:>6}{f(s['median_ape']):>14}{f(s['p90_ape']):>11}"
                         f"{f(s['uncalibrated_median_ape']):>20}{stop:>16}")
        lines.append(f"  {'pooled':<16}{block['rows']:>6}{f(block['median_ape']):>14}{f(block['p90_ape']):>11}"
                     f"{f(block['uncalibrated_median_ape']):>20}")
        budget = sum(bool(s.get("stopped_by_budget")) for s in block["folds"].values())
        if budget:
            lines.append(f"  {budget} of {len(block['folds'])} fold fits stopped at the iteration budget "
                         f"(max_nfev {block['max_nfev']}), not at a tolerance: their figures carry the optimizer's path")
        if "by_load" in block:
            lines += ["  " + x for x in load_split_lines(block["by_load"])]
        worst = [r for r in block.get("held_out", []) if r["error_pct"] is not None][:worst_rows]
        if worst:
            lines.append(f"  worst held-out rows (of {len(block['held_out'])}):")
            lines += [f"    {r['error_pct']:+7.1f} %  {r['version']} {r['hardware']} x{r['accelerators']} {r['model']} "
                      f"{r['scenario']}  ({r['predicted_tokens_per_s']:,.0f} vs {r['published_tokens_per_s']:,.0f} tokens/s)"
                      for r in worst]
    return "\n".join(lines)


__all__ = ["FOLD_KINDS", "cross_validate", "format_cv", "transfer_prior", "held_out_round", "SCALE_PARAMETERS"]
