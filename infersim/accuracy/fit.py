"""The fit: named, physically bounded parameters fitted to published frontier rows.

Residual per frontier row i: r_i = log(pred_i(θ) / published_i); per measured operating point j
(``oppoints``, optional): w_op · A_j · log(TPOT_j(θ) at the run's steady occupancy / its TPOT p50), A_j the
load amplification of that error (``op_residual``); plus a weak prior
``prior_weight · (x_j − x_prior_j)`` per parameter, with x the parameter scaled to [0, 1] over its
documented range (``params``). Minimised by ``scipy.optimize.least_squares`` (trf, soft_l1 loss)
with a finite-difference Jacobian whose sparsity pattern (a row depends only on its own
hardware's parameters and on the round steps between its round and the reference) lets one
evaluation perturb many columns at once.
"""

from __future__ import annotations

import datetime as _dt
import math
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from ..errors import SpecError
from .data import PredictionKey, Row, as_rows, data_label, frontier_mask, row_keys, version_key
from .params import (HARDWARE_RANGES, HOST_PARAMETERS, KERNEL_PARAMETERS, ROUND_FACTORS, Parameter, bound_findings, check_names,
                     hardware_parameters, monotone_violations, round_values, step_support)
from .params import round_parameters as _round_params
from .jacobian import JACOBIAN_KINDS, SecantJacobian, column_groups
from .progress import Progress
from .result import CalibrationResult
from .oppoints import OpRow, bundled_data, load_op_rows, usable
from .runner import Lock, Outcome, Runner, Values, runner_for
from .summary import stats

DEFAULT_PARAMETERS: tuple[str, ...] = ("compute_fraction", "kv_memory_fraction", "attention_fraction", "gemm_overlap",
                                       "moe_memory_fraction", "fp4_memory_fraction", "step_overhead_ms")
"""Hardware efficiency parameters fitted by default (the shipped fit's, since 2026-11-25). The
small-GEMM knee ``gemm_m_half`` stays at its documented default (about one small tile), so a
batch-1 GEMM stays memory-bound; the slowness of decode GEMMs near the ridge point is fitted as
``gemm_overlap`` (pipeline fill and drain that the MMAs do not hide) and the slow weight stream of
routed-expert grouped GEMMs as ``moe_memory_fraction``. ``memory_fraction`` (dense weight
streaming) stays at its measured default: fitting it lets it absorb errors from elsewhere. The
block-scaled FP4 weight stream (``fp4_memory_fraction``, measured at 0.22-0.5 of peak on B200
where 8- and 16-bit GEMMs stream at 0.65-0.75) is fitted on GPUs with FP4 tensor cores only
(``HardwareSpec.has_efficiency``)."""

KNEE_PARAMETERS: tuple[str, ...] = ("compute_fraction", "kv_memory_fraction", "attention_fraction", "gemm_m_half",
                                    "step_overhead_ms")
"""The set shipped until 2026-11-25: a fitted small-GEMM knee (it landed at 136-906 rows, above the
ridge point, pricing batch-1 GEMMs compute-bound). Kept for ``benchmarks/physical_refit.py --knee``."""

PHYSICAL_PARAMETERS: tuple[str, ...] = ("compute_fraction", "kv_memory_fraction", "attention_fraction", "gemm_overlap",
                                        "step_overhead_ms")
"""The 2026-11-23 physical variant (``benchmarks/physical_refit.py``, with the host overhead held
to its physical 1.5 ms range): ``gemm_overlap`` without the expert stream efficiency."""

ROUND_PARAMETERS: tuple[str, ...] = tuple(ROUND_FACTORS)
"""Per-round preset parameters (software maturity)."""

INFEASIBLE_RESIDUAL = -3.0
"""log(pred/published) charged to a row that becomes infeasible during the fit (pred ≈ 5 %)."""

REPIN_FRACTION = 0.05
"""The fit continues with re-pinned choices when the full search changed them for more rows than this."""

OP_SEARCH = Lock((), ("disagg",), 0, None)
"""Choices of an operating point's configuration: the capacity-best aggregated one (as ``infersim
validate --at-load``): its layout and transforms are then pinned for the fit."""

OP_SLOPE_STEP = 0.02
"""Relative occupancy step of the finite difference that gives an operating point's slope ε."""
OP_AMPLIFICATION = 10.0
"""Cap of ``op_residual``'s load amplification. 10 gives a run at 90 % of its configuration's rate
limit its full weight. With the cap at 1 (the plain step-cost error at the measured occupancy) the
fit left the TPOT at the measured *load* 21.6 % off (median) although the step cost at occupancy
was within 5.8 %: the error is amplified 1.5-9.6× by load (``benchmarks/at_load_decompose.py``)."""


def op_residual(tpot: tuple[float, float], measured: float, cap: float) -> float:
    """Operating-point residual: the step-cost error at the measured occupancy, as it shows at the
    measured *load*.

    A configuration carries a rate ∝ B / t(B) at occupancy B. If the model's mean TPOT at the
    measured occupancy B_m is off by δ = ln(t(B_m) / t_m), the occupancy that carries the measured
    rate moves until B / t(B) is restored, and the TPOT there is off by δ / (1 − ε) to first order,
    ε = d ln t / d ln B at B_m (``tpot`` holds t at B_m and at (1 + ``OP_SLOPE_STEP``)·B_m). Near
    a configuration's throughput limit ε → 1 and the amplification is capped at ``cap`` (≥ 1)."""
    t0, t1 = tpot
    eps = math.log(t1 / t0) / math.log1p(OP_SLOPE_STEP)
    amp = 1.0 / (1.0 - eps) if eps < 1.0 - 1.0 / cap else cap
    return max(1.0, amp) * math.log(t0 / measured)


def op_groups(ops: Sequence[OpRow]) -> dict[tuple[PredictionKey, float | None, tuple], list[int]]:
    """Indices of the operating points that one ``Runner.tpot_at`` evaluation prices together: same
    prediction key, own mean output length and own engine settings (``OpRow.run``)."""
    groups: dict[tuple[PredictionKey, float | None, tuple], list[int]] = {}
    for i, o in enumerate(ops):
        groups.setdefault((o.key, o.tokens_per_sample, o.run), []).append(i)
    return groups


def slope_occupancies(ops: Sequence[OpRow], idx: Sequence[int]) -> tuple[float, ...]:
    """Each indexed operating point's steady occupancy and (1 + ``OP_SLOPE_STEP``) times it, in
    that order (``op_residual``'s two TPOTs)."""
    return tuple(ops[i].occupancy * f for i in idx for f in (1.0, 1.0 + OP_SLOPE_STEP))


SNAP = 1e-12
"""Relative difference below which a trial value is its start value (round-off of the [0, 1] scaling)."""

SIGNIFICANT_DIGITS = 4
"""Fitted values are rounded to this many significant digits before they are reported or written."""


@dataclass(frozen=True)
class FitRow:
    row: Row
    key: PredictionKey


HOLDER_SHARE = 0.1
"""Smallest share of the pull towards a bound for which a group of rows is named in a finding."""


def _group(row) -> str:
    """A fit row's or operating point's group for ``_holders``: round, submitter and model (a
    published row keeps its submitter among its CSV columns)."""
    submitter = getattr(row, "submitter", None) or getattr(row, "columns", {}).get("submitter")
    return " ".join(part for part in (row.version, submitter, row.model) if part)


def _holders(findings: list[dict], params, x: np.ndarray, residuals, groups: Sequence[str], f_scale: float,
             diff_step: float) -> int:
    """Name, in each finding of a fitted value (a hardware efficiency, a round's step against its
    neighbour), the rows that hold it on its bound (in place: the text gains "held there by ...",
    the dict ``held_by``); returns the calls of ``residuals``.

    The fit's cost is ½·f²·Σ ρ((r_i/f)²) (soft_l1, f = ``f_scale``), so its gradient along a
    parameter is Σ_i ρ'_i·r_i·∂r_i/∂x, ρ'_i = (1 + (r_i/f)²)^(−1/2); a row pulls the value down
    where its term is positive, up where negative. ∂r/∂x by one difference of ``diff_step`` into
    the range (rows of other hardware are cache hits), against the residuals at ``x`` under the same
    pinned choices (the optimizer's last residuals may predate a re-pin). Groups (``_group``) with
    at least ``HOLDER_SHARE`` of the pull towards the finding's bound are named, largest first."""
    index = {p.label: j for j, p in enumerate(params) if p.kind in ("hardware", "step")}
    todo = [(f, index[f["parameter"]]) for f in findings if f.get("side") in ("lower", "upper")
            and f["parameter"] in index]
    if not todo:
        return 0
    n = len(groups)
    r0 = residuals(x)[:n]
    calls = 1
    rho_r = r0 / np.sqrt(1.0 + (r0 / f_scale) ** 2)  # ρ'_i·r_i: each row's gradient term per unit slope
    for f, j in todo:
        xh = x.copy()
        xh[j] = float(np.clip(x[j] + (diff_step if f["side"] == "lower" else -diff_step), 0.0, 1.0))
        if xh[j] == x[j]:
            continue
        slope = (residuals(xh)[:n] - r0) / (xh[j] - x[j])
        calls += 1
        pull = rho_r * slope * (1.0 if f["side"] == "lower" else -1.0)  # > 0: towards the bound
        total = float(np.sum(np.maximum(pull, 0.0)))
        if not total > 0.0:
            continue
        by_group: dict[str, list] = {}  # group → [its pull towards the bound, its residuals that move]
        for g, v, s in zip(groups, pull, slope):
            entry = by_group.setdefault(g, [0.0, 0])
            entry[0] += max(float(v), 0.0)
            entry[1] += bool(s != 0.0)
        ranked = sorted(((v / total, g, k) for g, (v, k) in by_group.items()), reverse=True)
        held = [{"group": g, "share": round(share, 3), "residuals": k} for share, g, k in ranked
                if share >= HOLDER_SHARE][:3]
        if held:
            f["held_by"] = held
            f["text"] += "; held there by " + ", ".join(
                f"{h['group']} ({h['residuals']} residual{'s' if h['residuals'] != 1 else ''}, "
                f"{100 * h['share']:.0f} % of the pull)" for h in held)
    return calls


def round_sig(x: float, digits: int = SIGNIFICANT_DIGITS) -> float:
    if x == 0 or not math.isfinite(x):
        return float(x)
    return float(f"{x:.{digits}g}")


def fit_rows(rows: Sequence[Row], hardware_ids: Iterable[str] | None, presets_dir=None
             ) -> tuple[list[FitRow], list[tuple[Row, str]]]:
    """Frontier rows (of ``hardware_ids`` when given) with their keys; rows without a key, with the reason."""
    rows = list(rows)
    wanted = set(hardware_ids) if hardware_ids is not None else None
    out, bad = [], []
    for r, front, key in zip(rows, frontier_mask(rows), row_keys(rows, presets_dir)):
        if not front or (wanted is not None and r.hardware not in wanted):
            continue
        if isinstance(key, str):
            bad.append((r, key))
        else:
            out.append(FitRow(r, key))
    return out, bad


def _class_defaults(cls) -> dict[str, float]:
    return {name: f.default for name, f in cls.model_fields.items() if isinstance(f.default, (int, float))}


def hardware_defaults(runner: Runner, hw_id: str, names: Sequence[str]) -> dict[str, float]:
    """Documented (spec-sheet) defaults of a hardware's efficiency parameters.

    Read from the profile's ``# calibrated; default X`` comments; a profile given as an object
    (``hardware_override``) has its own values as defaults.
    """
    from ..specs import catalog
    from ..specs.hardware import EfficiencySpec
    from .yamledit import documented_defaults

    eff = runner.base_hardware(hw_id).efficiency
    if hw_id in runner.hardware_override:
        return {n: float(getattr(eff, n)) for n in names}
    try:
        return documented_defaults(catalog.resolve("hardware", hw_id), "efficiency", names,
                                   _class_defaults(EfficiencySpec))
    except (SpecError, OSError):
        return {n: float(getattr(eff, n)) for n in names}


MOE_ROUND_FACTORS = ("moe_kernel_efficiency",)
"""Round factors only MoE models exercise: one that no row of its round exercises is reported as a
note, not as a finding, wherever the round order leaves it."""

MOE_PARAMETERS = ("moe_memory_fraction",)
"""Hardware parameters only MoE models exercise: fitted only on a die with an MoE row or operating
point in the fit, else set to the fitted profiles' median (``_unexercised``)."""


def _unexercised(hw_ids, share: Mapping[str, str], fit, ops, names) -> set[tuple[str, str]]:
    """(hardware, parameter) pairs of ``names`` that no fit row or operating point of an MoE model on
    that die (the profile and the profiles carrying its die) can move: a least-squares fit would
    leave them at their start value, the documented default, which for a held-out model or a
    new die is no evidence at all."""
    if not names:
        return set()
    moe_fit, moe_ops = _moe_only(fit, ops)
    exercised = {share.get(h, h) for h in {fr.key.hardware for fr in moe_fit} | {o.hardware for o in moe_ops}}  # by die
    return {(h, n) for h in hw_ids if h not in share and h not in exercised for n in names}


def moe_without_evidence(rnd: dict[str, dict[str, float]], rounds: Iterable[str], reference: str | None,
                         documented: Mapping[str, Mapping[str, float]] | None = None) -> set[str]:
    """Give each of ``rounds`` (fitted rounds that no MoE row or operating point exercises) the
    round's own dense ``kernel_efficiency`` as its ``moe_kernel_efficiency`` (in place, in ``rnd``,
    which holds every round's values): with no evidence on a round's routed-expert kernels, the
    best guess is that they matured as the round's other kernels did; where the rounds'
    ``documented`` factors (``round_defaults``) differ, a measurement of the round's own MoE
    kernels (v6.0's CuTe DSL backend), the neighbour's value times that documented step instead.
    The value is kept inside the round order (a newer round's MoE kernels never slower, at most
    the factor's largest step faster than its neighbour's; walking outward from ``reference``, and
    in order with the next round beyond it where that one is not held too) and the factor's range.
    Returns the rounds held."""
    name = "moe_kernel_efficiency"
    if reference is None or name not in rnd.get(reference, {}):
        return set()
    spec = ROUND_FACTORS[name]
    held = set(rounds) - {reference}
    order = sorted(rnd, key=version_key)
    i_ref = order.index(reference)
    for side, newer in ((order[:i_ref][::-1], False), (order[i_ref + 1:], True)):
        prev = reference
        for i, r in enumerate(side):
            if r in held and "kernel_efficiency" in rnd[r]:
                n = rnd[prev][name]
                lo, hi = (n, n * spec.max_step) if newer else (n / spec.max_step, n)
                beyond = side[i + 1] if i + 1 < len(side) else None
                if beyond is not None and beyond not in held:
                    lo, hi = (lo, min(hi, rnd[beyond][name])) if newer else (max(lo, rnd[beyond][name]), hi)
                target = rnd[r]["kernel_efficiency"]
                doc_r, doc_p = ((documented.get(r) or {}).get(name), (documented.get(prev) or {}).get(name)) \
                    if documented else (None, None)
                if doc_r and doc_p and doc_r != doc_p:
                    target = n * doc_r / doc_p
                v = np.clip(target, lo, max(lo, hi))
                rnd[r][name] = float(np.clip(v, spec.range.lower, spec.range.upper))
            prev = r
    return held


def _moe_only(fit, ops) -> tuple[list, list]:
    """The fit rows and the operating points of an MoE model."""
    from ..specs import catalog  # profiles are cached by file

    return ([fr for fr in fit if catalog.load("model", fr.key.model).is_moe],
            [o for o in ops if catalog.load("model", o.model).is_moe])


TIES = {"kernels_as": ("die", KERNEL_PARAMETERS), "host_as": ("host", HOST_PARAMETERS)}
"""Efficiency fields naming a sibling profile → (what the two share, the parameters tied by it)."""


def tie_root(runner: Runner, h: str, field: str = "kernels_as") -> str:
    """The profile at the end of ``h``'s ``field`` chain (``kernels_as`` or ``host_as``; ``h``
    itself where it names none).

    Raises SpecError when the field names no hardware profile or forms a cycle."""
    from ..specs import catalog

    def sibling(g: str) -> str | None:
        k = getattr(runner.base_hardware(g).efficiency, field)
        if k is None:
            return None
        try:
            return catalog.profile_id("hardware", k)
        except SpecError as e:
            raise SpecError(f"{g}: efficiency.{field} '{k}' is not a hardware profile ({e})") from None

    root, seen = h, {h}
    while (k := sibling(root)) is not None and k != root:
        if k in seen:
            raise SpecError(f"{h}: efficiency.{field} forms a cycle ({' -> '.join(sorted(seen))})")
        seen.add(k)
        root = k
    return root


def die_root(runner: Runner, h: str) -> str:
    """``tie_root`` along ``kernels_as``: the profile whose GPU die ``h`` carries."""
    return tie_root(runner, h, "kernels_as")


def sharing(runner: Runner, hw_ids: Sequence[str], field: str = "kernels_as") -> tuple[dict[str, str], list[str]]:
    """{profile: profile whose ``field`` parameters it takes} among ``hw_ids`` (``TIES``: the die's
    kernel efficiencies or the host's cost per step, followed to the end of a chain), and notes
    for a sibling outside the fit.

    Raises SpecError when the field names no hardware profile or forms a cycle."""
    what = TIES[field][0]
    share, notes = {}, []
    for h in hw_ids:
        root = tie_root(runner, h, field)
        if root == h:
            continue
        if root in hw_ids:
            share[h] = root
        else:
            notes.append(f"{h} carries {root}'s {what} ({field}) but {root} has no rows in this fit: "
                         f"{h}'s {', '.join(TIES[field][1])} fitted on its own rows")
    return share, notes


def documented_round(names: Sequence[str], round_name: str, presets_dir=None) -> dict[str, float] | None:
    """The documented default of each round factor in ``round_name``'s own preset file (its
    ``# calibrated; default X`` comments: a measured maturity of that round's kernels over the
    reference round's, as v6.0's CuTe DSL MoE), or None where the round has no preset file."""
    from ..optimizations.presets import PresetSpec, preset_file
    from .yamledit import documented_defaults

    path = preset_file(round_name, presets_dir)
    if path is None:
        return None
    try:
        return documented_defaults(path, None, names, _class_defaults(PresetSpec))
    except (SpecError, OSError):
        return None


def round_defaults(names: Sequence[str], round_name: str | None = None, presets_dir=None) -> dict[str, float]:
    """Documented default of each round factor: ``round_name``'s documented value
    (``documented_round``) where its preset documents one, else the preset field default (1.0,
    no maturity change)."""
    from ..optimizations.presets import PresetSpec

    d = _class_defaults(PresetSpec)
    doc = documented_round(names, round_name, presets_dir) if round_name is not None else None
    return {n: float((doc or d)[n]) for n in names}


def _vals(d: Mapping[str, float]) -> Values:
    return tuple(sorted((k, float(v)) for k, v in d.items()))


def _median_ape(values: Sequence[float | None], published: np.ndarray) -> float | None:
    return stats([abs(v / p - 1) * 100 for v, p in zip(values, published) if v is not None])[0]


JACOBIAN: dict[str, tuple[str, int | None]] = {"current": ("secant", None), "default": ("secant", 3)}
"""Jacobian of a fit by its start: (kind, secant updates between fresh differences). Measured
2026-11-28 on the bundled rows and operating points, 2-core machine:

- from the current values (the everyday command, near the fit's optimum): one difference and
  secant updates, 20 evaluations and 43-61 s (median 50 s, eight runs) where the difference at
  every step took 80 and 210 s; its output 5.11 / 18.22 % frontier median / p90, 2.45 / 13.69 %
  operating points, against the difference's 4.69 / 19.16 % and 2.29 / 12.18 %.
- from the documented defaults (every cross-validation fold, ``--from-defaults``), a long and
  curved path on which secant slopes alone fall behind (8 iterations: 5.89 / 21.4 %, five bound
  findings): a fresh difference every third update. 5.27 / 20.7 % in 104 s, the difference
  5.57 / 19.8 % in 418 s; cross-validation by round and by model 606 s where the difference took
  2,272 s, held out 8.0 / 26.1 % and 9.9 / 27.4 % against 8.5 / 25.6 % and 9.8 / 29.7 % (docs/readme-sessions.md,
  Accuracy): the same within the folds' path noise.

The shipped values were fitted with the difference at every step (``--jacobian difference``)."""

CV_MAX_NFEV = 8
"""Optimizer evaluations of a fit from the documented defaults: each cross-validation fold's, and
the shipped values' (``infersim calibrate --from-defaults``)."""


def calibrate(rows: Sequence[Row] | str | os.PathLike, hardware_ids: Iterable[str] | None = None, *,
              fit_rounds: bool = True, parameters: Sequence[str] = DEFAULT_PARAMETERS,
              round_parameters: Sequence[str] = ROUND_PARAMETERS, min_rows: int = 3, max_nfev: int = 5,
              prior_weight: float = 0.05, f_scale: float = 0.25, diff_step: float = 0.05, pin_choices: bool = True,
              start: Literal["current", "default"] = "current", cv: bool = False, cv_max_nfev: int = CV_MAX_NFEV,
              cv_folds: Sequence[str] | None = None, presets_dir: str | os.PathLike | None = None,
              progress: Progress | None = None, workers: int | None = None, transfer: bool = True,
              runner: Runner | None = None, phase: str = "fit",
              operating_points: Sequence[OpRow] | str | os.PathLike | bool | None = None, op_weight: float = 1.0,
              op_amplification: float = OP_AMPLIFICATION,
              jacobian: Literal["secant", "difference"] | None = None, refresh: int | None = None,
              start_jitter: float = 0.0, jitter_seed: int = 0) -> CalibrationResult:
    """Fit hardware efficiencies (and round maturities) to the frontier rows of ``rows``.

    Parameters
    ----------
    rows : rows from :func:`infersim.accuracy.load_rows` (or a CSV path). Only frontier rows
        (best published result per version, hardware, model, scenario, accelerators) are fitted.
    hardware_ids : fit only these hardware profiles and only their parameters; round presets,
        shared by every hardware, are then left unchanged, and no prior is transferred.
    fit_rounds : also fit ``round_parameters`` of each round preset with rows, except the
        reference round (the one with most rows), whose values anchor the shared scale.
    parameters : efficiency fields fitted per hardware (keys of ``params.HARDWARE_RANGES``).
    min_rows : a hardware (or round) with fewer usable frontier rows keeps its values.
    max_nfev : optimizer function evaluations (scipy ``max_nfev``; Jacobian evaluations not counted).
    prior_weight : weight of a ridge term pulling each parameter to its documented default, per
        unit of its range; keeps parameters the data cannot see near their defaults.
    f_scale : soft_l1 scale in log units (0.25 ≈ 28 % error): larger residuals count ~linearly.
    diff_step : finite-difference step, as a fraction of each parameter's range.
    pin_choices : evaluate trial points with each key's optional round transforms and aggregated
        layout pinned to what the full search chose; the final numbers re-run the full search,
        and the fit continues once (``max_nfev // 2``) if the choices changed for more than
        ``REPIN_FRACTION`` of the rows.
    start : ``current`` (the profile and preset values) or ``default`` (documented defaults:
        what cross-validation uses, so that no fold starts from values fitted on its test rows).
    cv : also run :func:`infersim.accuracy.cross_validate` (``cv_max_nfev`` per fold, ``cv_folds``).
    presets_dir : presets folder (default: the bundled presets).
    progress : receives phases and per-evaluation residuals (see ``progress.Progress``).
    workers : processes for predictions (default: one per CPU, at most 4).
    transfer : give every hardware without enough rows the fleet prior (``transfer_prior``);
        only for a fit over all hardware.
    operating_points : measured operating points also fitted (``oppoints``): a list of ``OpRow``,
        a CSV path, True (the bundled data) or None/False (throughput rows only). Each adds
        ``op_weight · log(model mean TPOT at the run's steady occupancy / measured TPOT p50)`` (``oppoints``), the
        configuration pinned to the capacity-best aggregated one at the start values.
    op_weight : weight of an operating-point residual relative to a throughput row's.
    op_amplification : cap of the load amplification applied to each operating-point residual
        (``op_residual``); 1 fits the step cost at the measured occupancy unamplified.
    jacobian : ``secant``: one grouped finite difference (``diff_step``), then sparse Broyden
        updates along the optimizer's steps (``jacobian.SecantJacobian``); ``difference``: a
        grouped finite difference at every accepted step (scipy's). Default (None):
        ``JACOBIAN[start]``.
    refresh : with ``secant``, form the finite difference again after this many secant updates
        (None: once per pass; default with ``jacobian`` None: ``JACOBIAN[start]``'s).
    start_jitter, jitter_seed : the optimizer starts from the start values plus normal noise of this
        standard deviation on each parameter's [0, 1] scale (seeded; 0: none). A probe of how much
        a budget-stopped fit's outcome owes to its path; the predictions of the start values, the
        pinned choices and the prior are the unjittered ones.

    Returns
    -------
    CalibrationResult (nothing is written; see :func:`infersim.accuracy.write`).
    """
    from scipy.optimize import least_squares

    if jacobian is None:
        jacobian, refresh = JACOBIAN[start][0], refresh if refresh is not None else JACOBIAN[start][1]
    if jacobian not in JACOBIAN_KINDS:
        raise SpecError(f"jacobian must be one of {', '.join(JACOBIAN_KINDS)} (got {jacobian!r})")
    if refresh is not None and not (isinstance(refresh, int) and refresh >= 1):
        raise SpecError(f"refresh must be a positive number of secant updates (got {refresh!r})")
    t0 = time.perf_counter()
    prog = progress or Progress()
    rows = as_rows(rows)
    data = data_label(rows[0].file) if rows else "<memory>"
    scope = None
    if hardware_ids is not None:
        from ..specs import catalog

        scope = sorted({catalog.profile_id("hardware", h) for h in hardware_ids})
        fit_rounds, transfer = False, False
    names_r = tuple(round_parameters) if fit_rounds else ()
    check_names(parameters, names_r)
    fit, excluded = fit_rows(rows, scope, presets_dir)
    ops = _op_rows(operating_points, presets_dir)
    if ops:  # the provenance names every file the fit saw
        op_file = operating_points if isinstance(operating_points, (str, os.PathLike)) else bundled_data()
        data = f"{data} + {len(ops)} operating points of {data_label(op_file)}"
    with runner_for(runner, presets_dir, workers, len(fit) * 8) as run:
        hw_ids = sorted({fr.key.hardware for fr in fit})
        rounds_all = sorted({fr.key.preset for fr in fit}, key=version_key)
        defaults_hw = {h: hardware_defaults(run, h, parameters) for h in hw_ids}
        current_hw = {h: {n: float(getattr(run.base_hardware(h).efficiency, n)) for n in parameters} for h in hw_ids}
        rnd_names = tuple(ROUND_FACTORS)
        current_rnd = {r: {n: float(getattr(run.preset(r), n)) for n in rnd_names} for r in rounds_all}
        base_hw = current_hw if start == "current" else defaults_hw
        # every round's documented factors, the rounds without rows too (the held rule's neighbours)
        documented_rnd = {r: round_defaults(rnd_names, r, presets_dir)
                          for r in set(rounds_all) | set(_all_rounds(presets_dir))}
        base_rnd = current_rnd if start == "current" else {r: dict(documented_rnd[r]) for r in rounds_all}

        def tasks(hw: Mapping[str, Mapping[str, float]], rnd: Mapping[str, Mapping[str, float]], locks=None):
            return [(fr.key, _vals(hw[fr.key.hardware]), _vals(rnd[fr.key.preset]),
                     locks.get(fr.key) if locks else None) for fr in fit]

        prog.start(f"{phase}: start values on {len(fit)} frontier rows", len(fit))
        first = run.predict_many(tasks(base_hw, base_rnd))
        keep = []
        for fr, o in zip(fit, first):
            (keep if o.value is not None else excluded).append(fr if o.value is not None else (fr.row, o.reason))
        base_values = {fr.key: o.value for fr, o in zip(fit, first) if o.value is not None}
        fit = keep
        published = np.array([fr.row.tokens_per_s for fr in fit])
        fitted_keys_hw = set(hw_ids)
        ops = [o for o in ops if o.hardware in fitted_keys_hw and (scope is None or o.hardware in scope)]
        op_locks = {o.key: out.lock for o, out in zip(ops, run.predict_many(
            [(o.key, _vals(base_hw[o.hardware]) if o.hardware in base_hw else (), _vals(base_rnd.get(o.key.preset, {})),
              OP_SEARCH) for o in ops]))}
        ops = [o for o in ops if op_locks.get(o.key) is not None and o.key.preset in base_rnd]
        op_measured = np.array([o.tpot_s for o in ops])

        def op_eval(hw, rnd, alongside: Sequence[tuple] = ()) -> tuple[list, list[Outcome]]:
            """Model mean TPOT per operating point at its steady occupancy and (1 + ``OP_SLOPE_STEP``)
            times it, at the run's own mean output length (one ``Runner.tpot_at`` task per key, output
            length and engine settings over all its occupancies), and the outcomes of the tasks
            ``alongside``, predicted in the same batch so that the workers finish together."""
            groups = op_groups(ops)
            tasks_ = [(k, _vals(hw[k.hardware]), _vals(rnd[k.preset]), op_locks[k], slope_occupancies(ops, idx), osl,
                       settings) for (k, osl, settings), idx in groups.items()]
            outs = run.predict_many(list(alongside) + tasks_)
            out: list[tuple[float, float] | None] = [None] * len(ops)
            for idx, res in zip(groups.values(), outs[len(alongside):]):
                vals = res.value or (None,) * (2 * len(idx))
                for n, i in enumerate(idx):
                    out[i] = None if vals[2 * n] is None else (vals[2 * n], vals[2 * n + 1])
            return out, outs[:len(alongside)]

        def op_tpot(hw, rnd) -> list[float | None]:
            """``op_eval``'s TPOT at the steady occupancies only."""
            return [None if v is None else v[0] for v in op_eval(hw, rnd)[0]]

        op_first = op_tpot(base_hw, base_rnd)
        keep_ops = [i for i, v in enumerate(op_first) if v is not None]
        ops = [ops[i] for i in keep_ops]
        op_measured = op_measured[keep_ops]
        op_before = stats([abs(op_first[i] / op_measured[n] - 1) * 100 for n, i in enumerate(keep_ops)])
        before = stats([abs(base_values[fr.key] / fr.row.tokens_per_s - 1) * 100 for fr in fit])

        # owners with enough rows
        skipped: dict[str, str] = {h: "no usable frontier rows" for h in (scope or ()) if h not in hw_ids}
        hw_counts = {h: sum(fr.key.hardware == h for fr in fit) for h in hw_ids}
        params: list[Parameter] = []
        # profiles carrying the same die fit one value of each kernel efficiency, profiles carrying
        # the same host one value of its cost per step (on both's rows): (profile, parameter) → owner
        maps = {field: sharing(run, hw_ids, field) for field in TIES}
        share = maps["kernels_as"][0]
        notes = [note for _, ns in maps.values() for note in ns]
        ties: dict[tuple[str, str], tuple[str, str]] = {
            (d, n): (c, field) for field, (tie_map, _) in maps.items() for d, c in tie_map.items()
            for n in parameters if n in TIES[field][1]}
        unexercised = _unexercised(hw_ids, share, fit, ops, [n for n in parameters if n in MOE_PARAMETERS])
        sharers = {d for d, _ in ties}
        for h in hw_ids:
            own = [n for n in parameters if (h, n) not in ties and (h, n) not in unexercised
                   and run.base_hardware(h).has_efficiency(n)]
            rows_h = hw_counts[h] + sum(hw_counts[d] for d in {d for (d, _), (c, _) in ties.items() if c == h})
            if rows_h < min_rows or (h in sharers and hw_counts[h] < min_rows):
                skipped[h] = f"{hw_counts[h]} frontier row(s) < min_rows={min_rows}"
                continue
            ps, ns = hardware_parameters(h, own, base_hw[h], defaults_hw[h])
            params += ps
            notes += ns
        for (d, c, field) in sorted({(d, c, f) for (d, _), (c, f) in ties.items()}):
            names_t = ", ".join(n for n in parameters if ties.get((d, n)) == (c, field))
            notes.append(f"{d} carries {c}'s {TIES[field][0]} ({field}): {names_t} fitted as {c}'s, on both's rows")
        reference = None
        if names_r:
            rd_counts = {r: sum(fr.key.preset == r for fr in fit) for r in rounds_all}
            eligible = [r for r in rounds_all if rd_counts[r] >= min_rows]
            for r in rounds_all:
                if r not in eligible:
                    skipped[r] = f"{rd_counts[r]} frontier row(s) < min_rows={min_rows}"
            if eligible:
                reference = max(eligible, key=lambda r: (rd_counts[r], version_key(r)))
                skipped[reference] = "reference round (maturity fixed)"
                order = {r: i for i, r in enumerate(eligible)}
                ps, ns = _round_params(eligible, reference, names_r, base_rnd, order=order, start="current",
                                       prior=documented_rnd)
                params += ps
                notes += ns
        hw_idx = [j for j, p in enumerate(params) if p.kind == "hardware"]
        st_idx = [j for j, p in enumerate(params) if p.kind == "step"]
        anchor = dict(base_rnd[reference]) if reference else {}

        def theta_of(x: np.ndarray) -> list[float]:
            return [p.unscale(v) for p, v in zip(params, x)]

        def values_of(x: np.ndarray):
            th = theta_of(x)
            hw = {h: dict(base_hw[h]) for h in hw_ids}
            for j in hw_idx:
                hw[params[j].owner][params[j].name] = th[j]
            for (d, n), (c, _) in ties.items():
                hw[d][n] = hw[c][n]
            rnd = {r: dict(base_rnd[r]) for r in rounds_all}
            if reference:
                for r, vals in round_values([params[j] for j in st_idx], [th[j] for j in st_idx], anchor,
                                            reference).items():
                    rnd[r].update(vals)
            # a value that differs from its start value by round-off only (scaling there and back)
            # is the start value, so that trial points at the start read the start's predictions
            for out, base in ((hw, base_hw), (rnd, base_rnd)):
                for owner, vals in out.items():
                    for n, v in vals.items():
                        b = base[owner].get(n)
                        if b is not None and v != b and abs(v - b) <= SNAP * abs(b):
                            vals[n] = b
            return hw, rnd

        x0 = np.array([p.scale(p.initial) for p in params])
        xp = np.array([p.scale(p.prior) for p in params])
        locks: dict[PredictionKey, Lock | None] = {}
        if pin_choices:
            searched = run.predict_many(tasks(base_hw, base_rnd))
            locks = {fr.key: o.lock for fr, o in zip(fit, searched)}
            # the search pinned to what the full search chose is that search's outcome: the first
            # evaluation reads it instead of pricing the chosen configurations again
            for task, o in zip(tasks(base_hw, base_rnd, locks), searched):
                run.remember(task, o)
        n_eval = 0

        def residuals(x: np.ndarray) -> np.ndarray:
            nonlocal n_eval
            n_eval += 1
            hw, rnd = values_of(x)
            t_op, outs = op_eval(hw, rnd, alongside=tasks(hw, rnd, locks))
            values = [o.value for o in outs]
            prog.advance(_median_ape(values, published))
            r = np.array([math.log(v / p) if v is not None else INFEASIBLE_RESIDUAL for v, p in zip(values, published)])
            r_op = np.array([op_weight * (op_residual(v, m, op_amplification) if v is not None
                                          else -INFEASIBLE_RESIDUAL) for v, m in zip(t_op, op_measured)])
            return np.concatenate([r, r_op, prior_weight * (x - xp)])

        fitted_rnd = {params[j].owner for j in st_idx}
        moe_fit, moe_ops = _moe_only(fit, ops)
        moe_rounds = {fr.key.preset for fr in moe_fit} | {o.key.preset for o in moe_ops}
        # every round's file values: the neighbours the fit leaves alone keep them
        file_rnd = {r: {n: float(getattr(run.preset(r), n)) for n in names_r} for r in _all_rounds(presets_dir)} \
            if names_r else {}
        fitted_hw = {params[j].owner for j in hw_idx}
        # written with the shared values; a profile with too few rows of its own is not: its other
        # parameters were never fitted (``transfer_prior`` gives it the sibling's tied values)
        fitted_hw |= {d for (d, _), (c, _) in ties.items() if c in fitted_hw and d not in skipped}

        def reported(x: np.ndarray):
            """The values written for ``x``: rounded, an unexercised MoE parameter at the fitted
            profiles' median, a round without MoE evidence held (``moe_without_evidence``); with
            the notes those substitutions add."""
            hw, rnd = values_of(x)
            added = []
            moe_held = set()
            if "moe_kernel_efficiency" in names_r:
                moe_held = moe_without_evidence({**file_rnd, **rnd}, fitted_rnd - moe_rounds, reference, documented_rnd)
            hardware_out = {h: {n: round_sig(hw[h][n]) for n in parameters if run.base_hardware(h).has_efficiency(n)}
                            for h in sorted(fitted_hw)}
            for n in {n for _, n in unexercised}:  # no row of the fit exercises it: the fleet's median
                fitted_n = [hardware_out[params[j].owner][n] for j in hw_idx if params[j].name == n]
                if not fitted_n:
                    continue
                value = round_sig(float(np.median(fitted_n)))
                for h in sorted(h for h, m in unexercised if m == n and h in hardware_out):
                    for g in [h] + [d for d, c in share.items() if c == h and d in hardware_out]:
                        hardware_out[g][n] = value
                    added.append(f"{h}.{n}: no MoE row or operating point on this die in the fit; the median of "
                                 f"the {len(fitted_n)} fitted profiles ({value:g}) in place of its documented default")
            presets_out = {r: {n: round_sig(rnd[r][n]) for n in names_r} for r in rounds_all if r in fitted_rnd}
            for h in hardware_out:
                hw[h] = {**hw[h], **hardware_out[h]}
            for r in presets_out:
                rnd[r] = {**rnd[r], **presets_out[r]}
            return hw, rnd, hardware_out, presets_out, moe_held, added

        message = "no free parameters"
        budget_stop = False
        x = x0.copy()
        if start_jitter > 0 and len(x):  # a path-noise probe: the same fit from a nearby start
            x = np.clip(x + np.random.default_rng(jitter_seed).normal(0.0, start_jitter, len(x)), 0.0, 1.0)
        if params and fit:
            n_res = len(fit) + len(ops)
            sparsity = np.zeros((n_res + len(params), len(params)), dtype=bool)
            reach = step_support(params, reference) if reference else {}
            for i, key in enumerate([fr.key for fr in fit] + [o.key for o in ops]):
                for j, p in enumerate(params):
                    sparsity[i, j] = (p.owner == key.hardware or ties.get((key.hardware, p.name), ("",))[0] == p.owner) \
                        if p.kind == "hardware" else (key.preset in reach[j])
            sparsity[n_res:, :] = np.eye(len(params), dtype=bool)
            n_groups = len(column_groups(sparsity))  # the progress bar's estimate
            previous = None
            for outer in range(2 if pin_choices else 1):
                budget = max_nfev if outer == 0 else max(1, max_nfev // 2)
                if jacobian == "secant":
                    # the second pass starts from the first's slopes: re-pinning moves a few rows
                    jac = SecantJacobian(residuals, sparsity, diff_step, initial=previous, refresh=refresh)
                    kw = {"jac": jac}
                    fun = jac.tracked
                    differences = (previous is None) + (budget // refresh if refresh else 0)
                    total = budget + n_groups * differences  # about: a refresh comes after every ``refresh`` steps
                else:
                    kw = {"jac": "2-point", "jac_sparsity": sparsity, "diff_step": diff_step}
                    fun = residuals
                    total = budget * (n_groups + 1)
                prog.start(f"{phase}: {len(params)} parameters on {len(fit)} frontier rows (pass {outer + 1})", total)
                while True:
                    res = least_squares(fun, x, bounds=(0.0, 1.0), method="trf", loss="soft_l1", f_scale=f_scale,
                                        x_scale=1.0, max_nfev=budget, ftol=2e-3, xtol=2e-3, gtol=1e-6, **kw)
                    budget -= res.nfev
                    x = np.clip(res.x, 0.0, 1.0)
                    if jacobian != "secant" or res.status == 0 or budget < 1 or jac.updates == 0:
                        break
                    # a tolerance met on secant slopes may be the slopes' fault (steps rejected until
                    # the region shrank): go on from a fresh difference, stop where that one stops
                    jac.restart()
                if jacobian == "secant":
                    previous = jac.jac
                message = res.message
                budget_stop = res.status == 0  # scipy: the function-evaluation budget was reached
                if not pin_choices:
                    break
                hw, rnd = reported(x)[:2]  # the values the final search will price: one search serves both
                new = {fr.key: o.lock for fr, o in zip(fit, run.predict_many(tasks(hw, rnd)))}
                new_op = {o.key: out.lock for o, out in zip(ops, run.predict_many(
                    [(o.key, _vals(hw[o.hardware]), _vals(rnd[o.key.preset]), OP_SEARCH) for o in ops]))}
                new_op = {k: v if v is not None else op_locks[k] for k, v in new_op.items()}
                changed = sum(new[k] != locks.get(k) for k in new) + sum(new_op[k] != op_locks[k] for k in new_op)
                if changed <= REPIN_FRACTION * (len(new) + len(new_op)):
                    break
                locks = new
                op_locks.update(new_op)

        hw, rnd, hardware_out, presets_out, moe_held, added = reported(x)
        notes += added
        prog.start(f"{phase}: final full search", len(fit))
        after_values = [o.value for o in run.predict_many(tasks(hw, rnd))]
        after = stats([abs(v / fr.row.tokens_per_s - 1) * 100 for fr, v in zip(fit, after_values) if v is not None])
        final_op = run.predict_many([(o.key, _vals(hw[o.hardware]), _vals(rnd[o.key.preset]), OP_SEARCH) for o in ops])
        op_locks.update({o.key: out.lock for o, out in zip(ops, final_op) if out.lock is not None})
        op_after_values = op_tpot(hw, rnd)
        op_after = stats([abs(v / m - 1) * 100 for v, m in zip(op_after_values, op_measured) if v is not None])

        findings = [f.to_dict() for f in bound_findings(params, x, rnd)]
        # a round's MoE factor that no row of the round exercises takes the round's own dense kernel
        # maturity within the round order (``moe_without_evidence``): no evidence either way, so a
        # note and not a finding
        for f in list(findings):
            r, _, name = f["parameter"].rpartition(".")  # round names carry a dot (v4.0)
            if name in MOE_ROUND_FACTORS and r in moe_held:
                findings.remove(f)
        for r in sorted(moe_held, key=version_key):
            notes.append(f"{r}.moe_kernel_efficiency: no MoE row or operating point of this round in the fit; "
                         f"held by rule (its documented MoE step where its preset gives one, else its dense "
                         f"kernel maturity) within the round order "
                         f"({rnd[r]['moe_kernel_efficiency']:.4g}), not evidence either way")
        if findings and params and fit:
            calls = _holders(findings, params, x, residuals, [_group(fr.row) for fr in fit] + [_group(o) for o in ops],
                             f_scale, diff_step)
            n_eval -= calls  # diagnostics, not the fit's own evaluations (after the call: it counts them)
        for f in list(findings):  # a tied value's finding belongs to every profile that carries it
            owner, _, name = f["parameter"].partition(".")
            for (d, n), (c, field) in sorted(ties.items()):
                if c == owner and n == name:
                    findings.append({**f, "parameter": f"{d}.{name}",
                                     "text": f"{d}.{f['text'].partition('.')[2]} ({c}'s value: {field} {c})"})
        if names_r:
            for text in monotone_violations({**file_rnd, **presets_out}):
                findings.append({"parameter": text.split(" ", 1)[0], "value": None, "bound": None, "side": "order",
                                 "text": text + " (a round with too few rows to fit keeps its file value)"})
        by_owner: dict[str, dict[str, Any]] = {}
        for kind, attr in (("hardware", "hardware"), ("preset", "preset")):
            for owner in sorted({getattr(fr.key, attr) for fr in fit}):
                idx = [i for i, fr in enumerate(fit) if getattr(fr.key, attr) == owner]
                apes = [abs(after_values[i] / fit[i].row.tokens_per_s - 1) * 100 for i in idx
                        if after_values[i] is not None]
                by_owner[owner] = {"kind": kind, "rows": len(idx), "median_ape": stats(apes)[0],
                                   "n_failed": len(idx) - len(apes)}
        row_errors = [{"version": fr.row.version, "hardware": fr.row.hardware, "model": fr.row.model,
                       "scenario": fr.row.scenario, "accelerators": fr.row.accelerators,
                       "published": fr.row.tokens_per_s, "predicted_before": base_values[fr.key],
                       "predicted_after": v, "error_pct_after": None if v is None else (v / fr.row.tokens_per_s - 1) * 100}
                      for fr, v in zip(fit, after_values)]
        from ..specs import catalog

        labels = [f"{h}.{n}" for h in hardware_out for n in hardware_out[h]] + \
                 [f"{r}.{n}" for r in presets_out for n in names_r]
        initial = {f"{h}.{n}": base_hw[h][n] for h in hardware_out for n in hardware_out[h]}
        initial.update({f"{r}.{n}": base_rnd[r][n] for r in presets_out for n in names_r})
        defaults = {f"{h}.{n}": defaults_hw[h][n] for h in hardware_out for n in hardware_out[h]}
        defaults.update({f"{r}.{n}": documented_rnd[r][n] for r in presets_out for n in names_r})
        result = CalibrationResult(
            hardware=hardware_out, presets=presets_out, initial=initial, defaults=defaults, parameters=labels,
            skipped=skipped, reference_round=reference, rows=len(fit), excluded=excluded,
            before={"median_ape": before[0], "p90_ape": before[1], "op_rows": len(ops), "op_median_ape": op_before[0],
                    "op_p90_ape": op_before[1]},
            after={"median_ape": after[0], "p90_ape": after[1], "op_rows": len(ops), "op_median_ape": op_after[0],
                   "op_p90_ape": op_after[1]},
            by_owner=by_owner, row_errors=row_errors, data=data, date=_dt.date.today().isoformat(),
            seconds=time.perf_counter() - t0, evaluations=n_eval, predictions=run.calls, message=message,
            stopped_by_budget=budget_stop,
            findings=findings, notes=notes, presets_dir=str(presets_dir) if presets_dir is not None else None,
            scope=scope, hardware_files={h: str(catalog.resolve("hardware", h)) for h in hardware_out
                                         if h not in run.hardware_override})
        result.round_values = {r: dict(rnd[r]) for r in rounds_all}
        result.held_factors = {r: set(MOE_ROUND_FACTORS) for r in moe_held}
        result.op_errors = [{"version": o.version, "hardware": o.hardware, "model": o.model, "scenario": o.scenario,
                             "submitter": o.submitter, "system": o.system, "occupancy": o.occupancy,
                             "tpot_p50_ms": o.tpot_s * 1e3, "predicted_ms": None if v is None else v * 1e3}
                            for o, v in zip(ops, op_after_values)]
        result.hardware_values = {h: dict(hw[h]) for h in hw_ids}
        if transfer and hardware_out:
            from .cv import transfer_prior

            for hw_id in catalog.list_ids("hardware"):
                if hw_id in hardware_out:
                    continue
                result.transferred[hw_id] = transfer_prior(result, hw_id, run)
                n = hw_counts.get(hw_id, 0)
                result.transfer_reasons[hw_id] = (f"{n} usable frontier row(s) < min_rows={min_rows}" if n
                                                  else "no rows for this hardware")
        prog.log(f"{phase} done in {result.seconds:.1f} s ({n_eval} evaluations, {run.calls} predictions): frontier "
                 f"median APE {before[0] or 0:.1f} % -> {after[0] or 0:.1f} %")
        if cv:
            from .cv import FOLD_KINDS, cross_validate

            result.cv = cross_validate(rows, folds=tuple(cv_folds or FOLD_KINDS), fit_rounds=fit_rounds,
                                       operating_points=operating_points, op_weight=op_weight,
                                       parameters=parameters, min_rows=min_rows, max_nfev=cv_max_nfev,
                                       prior_weight=prior_weight, f_scale=f_scale, diff_step=diff_step,
                                       pin_choices=pin_choices, presets_dir=presets_dir, progress=prog, runner=run)
        return result


def _op_rows(spec, presets_dir) -> list[OpRow]:
    """Operating points to fit from ``calibrate``'s ``operating_points`` argument."""
    if spec is None or spec is False:
        return []
    if spec is True:
        return usable(load_op_rows(None, presets_dir))
    if isinstance(spec, (str, os.PathLike)):
        return usable(load_op_rows(spec, presets_dir))
    return list(spec)


def _all_rounds(presets_dir) -> list[str]:
    from .data import preset_rounds

    return preset_rounds(presets_dir)


__all__ = ["calibrate", "JACOBIAN", "DEFAULT_PARAMETERS", "KNEE_PARAMETERS", "PHYSICAL_PARAMETERS", "ROUND_PARAMETERS", "HARDWARE_RANGES", "FitRow", "fit_rows",
           "hardware_defaults", "documented_round", "round_defaults", "round_sig"]
