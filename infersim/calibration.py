"""Calibration: fit the model's few named free parameters to published MLPerf rows.

The free parameters live only in data: per hardware profile a subset of
``CALIBRATABLE_EFFICIENCY`` (``efficiency.compute_fraction`` …) and per round preset the two
maturity parameters ``kernel_efficiency``, ``moe_kernel_efficiency`` and ``host_overhead_scale``. ``calibrate`` fits them
with ``scipy.optimize.least_squares`` (robust ``soft_l1`` loss) on log(predicted / published)
over frontier rows, ``cross_validate`` reports held-out error (leave one round out, leave one
hardware out), and ``write`` puts fitted values into YAML copies (or, when asked, in place) with a
``calibration:`` provenance record. Sits beside validation at the report end of the data flow.
"""

from __future__ import annotations

import datetime as _dt
import math
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import yaml

from .errors import SpecError
from .specs.hardware import CALIBRATABLE_EFFICIENCY, HardwareSpec
from .validation import (PredictionKey, Row, _atomic_write, _stats, frontier_mask, load_rows, predict_key,
                         resolve_preset)

DEFAULT_PARAMETERS: tuple[str, ...] = ("compute_fraction", "kv_memory_fraction", "attention_fraction", "gemm_m_half",
                                       "step_overhead_ms")
"""Hardware efficiency parameters fitted by default (all in ``CALIBRATABLE_EFFICIENCY``).
``memory_fraction`` (weight streaming) is left at its measured default: fitting it lets it absorb
errors from elsewhere."""

ROUND_PARAMETERS: tuple[str, ...] = ("kernel_efficiency", "moe_kernel_efficiency", "host_overhead_scale")
"""Per-round preset parameters (software maturity)."""

BOUNDS: dict[str, tuple[float, float]] = {
    # physically plausible ranges, so that a fit cannot hide model error behind absurd values
    "compute_fraction": (0.3, 0.95),
    "memory_fraction": (0.5, 0.95),
    "kv_memory_fraction": (0.25, 0.9),
    "attention_fraction": (0.15, 0.9),
    "gemm_m_half": (0.0, 1024.0),
    "step_overhead_ms": (0.0, 5.0),
    "kernel_efficiency": (0.5, 1.5),
    "moe_kernel_efficiency": (0.3, 1.5),
    "host_overhead_scale": (0.0, 5.0),
}
"""Search bounds per parameter: fractions of peak, milliseconds, or multipliers."""

INFEASIBLE_RESIDUAL = -3.0
"""log(pred/published) charged to a row that becomes infeasible during the fit (pred ≈ 5 %)."""

SIGNIFICANT_DIGITS = 4
"""Fitted values are rounded to this many significant digits before they are reported or written."""


# ---------------------------------------------------------------------------------------------
# Parameters and predictions under trial values


@dataclass(frozen=True)
class Parameter:
    """One free parameter: where it lives, its bounds and its starting value."""

    kind: Literal["hardware", "preset"]
    owner: str
    """Hardware ID, or preset round (vX.Y)."""
    name: str
    lower: float
    upper: float
    initial: float

    @property
    def label(self) -> str:
        return f"{self.owner}.{self.name}"


Values = tuple[tuple[str, float], ...]
"""Trial values of one owner's parameters, sorted by name (hashable)."""

Lock = tuple[tuple[str, ...], tuple[str, ...], int] | None
"""Pinned round choices for a key: (enabled kinds, disabled kinds, MTP depth); None = searched."""


class _Evaluator:
    """Predicts keys under trial parameter values; caches specs, preset folders and predictions.

    Hardware values go in through ``predict``'s ``inputs`` (a ``model_copy`` of the profile with a
    new ``efficiency``); preset values through a temporary presets folder holding a modified copy
    of the round's preset (one folder per distinct value set, so cached presets never go stale).
    """

    def __init__(self, presets_dir: str | os.PathLike | None, workdir: Path):
        self.presets_dir = Path(presets_dir) if presets_dir is not None else None
        self.workdir = workdir
        self._hardware: dict[tuple[str, Values], HardwareSpec] = {}
        self._preset_dirs: dict[tuple[str, Values], Path | None] = {}
        self._presets: dict[str, Any] = {}
        self.cache: dict[tuple, tuple[float | None, str, tuple[tuple[str, ...], int] | None]] = {}
        self.calls = 0
        self.pool = None
        self.workers = 1

    def base_hardware(self, hw_id: str) -> HardwareSpec:
        from .specs import catalog

        return catalog.load_hardware(hw_id)

    def base_preset(self, round_name: str):
        from .optimizations.presets import load_preset

        if round_name not in self._presets:
            self._presets[round_name] = load_preset(round_name, self.presets_dir)
        return self._presets[round_name]

    def hardware(self, hw_id: str, values: Values) -> HardwareSpec | None:
        if not values:
            return None
        key = (hw_id, values)
        if key not in self._hardware:
            base = self.base_hardware(hw_id)
            eff = base.efficiency.model_copy(update=dict(values))
            self._hardware[key] = base.model_copy(update={"efficiency": eff})
        return self._hardware[key]

    def preset_dir(self, round_name: str, values: Values) -> Path | None:
        if not values:
            return self.presets_dir
        key = (round_name, values)
        if key not in self._preset_dirs:
            spec = self.base_preset(round_name).model_copy(update=dict(values))
            d = Path(tempfile.mkdtemp(prefix=f"p{os.getpid()}-", dir=self.workdir))
            data = spec.model_dump(mode="json", exclude_none=True)
            (d / f"{round_name}.yaml").write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
            self._preset_dirs[key] = d
        return self._preset_dirs[key]

    def predict(self, key: PredictionKey, hw_values: Values, round_values: Values, lock: Lock = None):
        """(tokens/s or None, reason, choice signature or None) for one key under trial values."""
        ckey = (key, hw_values, round_values, lock)
        hit = self.cache.get(ckey)
        if hit is not None:
            return hit
        self.calls += 1
        hw = self.hardware(key.hardware, hw_values)
        kwargs: dict[str, Any] = {}
        if lock is not None:
            enable, disable, depth = lock
            kwargs = {"enable": list(enable), "disable": list(disable)}
            if depth and "mtp" in enable:
                kwargs["params"] = {"mtp": {"depth": depth}}
        value, reason, pred = predict_key(key, inputs_override={key.hardware: hw} if hw is not None else None,
                                          presets_dir=self.preset_dir(key.preset, round_values), **kwargs)
        if lock is not None and value is None and reason.startswith("bad input"):
            # the pinned choices are not accepted (e.g. a renamed option): search them instead
            value, reason, pred = predict_key(key, inputs_override={key.hardware: hw} if hw is not None else None,
                                              presets_dir=self.preset_dir(key.preset, round_values))
        sig = None
        if pred is not None and pred.feasible:
            cfg = pred.config
            sig = (tuple(cfg.get("optimizations", ())), int(cfg.get("mtp_depth", 0) or 0))
        out = (value, reason, sig)
        self.cache[ckey] = out
        return out

    def start_pool(self, workers: int) -> None:
        """Predict uncached keys in ``workers`` forked processes (no-op for 1 or without fork)."""
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        if workers <= 1 or self.pool is not None or "fork" not in multiprocessing.get_all_start_methods():
            return
        try:
            self.pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("fork"))
            self.workers = workers
        except (OSError, ValueError, RuntimeError):
            self.pool = None

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(cancel_futures=True)
            self.pool = None

    def prefetch(self, tasks) -> None:
        """Fill the cache for ``tasks`` (tuples of ``predict`` arguments) using the pool."""
        global _POOL_EVALUATOR
        if self.pool is None:
            return
        todo = list(dict.fromkeys(t for t in tasks if t not in self.cache))
        if len(todo) < 2 * self.workers:
            return
        _POOL_EVALUATOR = self  # workers fork at the pool's first use and inherit this
        try:
            results = list(self.pool.map(_pool_predict, todo, chunksize=max(1, len(todo) // (4 * self.workers))))
        except (OSError, RuntimeError):  # a broken pool: carry on in this process
            self.pool = None
            return
        self.calls += len(todo)
        self.cache.update(zip(todo, results))

    def lock_for(self, key: PredictionKey, sig) -> Lock:
        """Pin the round's optional transforms to those the search chose (faster re-evaluation)."""
        if sig is None:
            return None
        choices = [c.get("kind") for c in self.base_preset(key.preset).choices]
        if not choices:
            return None
        applied, depth = sig
        enable = tuple(k for k in choices if k in applied)
        disable = tuple(k for k in choices if k not in applied)
        return (enable, disable, depth if "mtp" in enable else 0)


# ---------------------------------------------------------------------------------------------
# The fit


@dataclass(frozen=True)
class _FitRow:
    row: Row
    key: PredictionKey


@dataclass
class CalibrationResult:
    """Fitted values, the fit's residual error and (optionally) cross-validated error.

    Percentages are absolute percentage errors of frontier rows, %.
    """

    hardware: dict[str, dict[str, float]]
    """Fitted efficiency values per hardware ID (rounded to ``SIGNIFICANT_DIGITS``)."""
    presets: dict[str, dict[str, float]]
    """Fitted maturity values per preset round."""
    initial: dict[str, float]
    """Starting (profile / preset) value per parameter label."""
    parameters: list[str]
    """Labels of the fitted parameters, ``owner.name``."""
    skipped: dict[str, str]
    """Owners (hardware IDs, rounds) left at their defaults, with the reason."""
    reference_round: str | None
    """Round whose maturity stays fixed (anchors the scale shared with hardware efficiencies)."""
    rows: int
    """Frontier rows used in the fit."""
    excluded: list[tuple[Row, str]]
    """Frontier rows not used: not predictable at the starting values, with the reason."""
    before: dict[str, float | None]
    """median_ape / p90_ape of the fit rows at the starting values."""
    after: dict[str, float | None]
    """median_ape / p90_ape of the fit rows at the fitted values (full search, no pinning)."""
    by_owner: dict[str, dict[str, Any]]
    """Per hardware ID / round: rows and median APE after the fit (for provenance records)."""
    row_errors: list[dict[str, Any]]
    """Per fit row: published, predicted before and after, signed error % after."""
    data: str
    """Data file the fit used: its name and SHA-256 prefix (or a label for rows built in code)."""
    date: str
    """ISO date of the fit."""
    seconds: float
    """Wall time of the fit (excluding cross-validation), seconds."""
    evaluations: int
    """Residual-vector evaluations (Jacobian columns included)."""
    predictions: int
    """Distinct predictions made (cache misses)."""
    message: str
    """Optimizer status."""
    hardware_files: dict[str, str] = field(default_factory=dict)
    """Profile file each fitted hardware was read from (``write(in_place=True)`` targets these)."""
    presets_dir: str | None = None
    """Presets folder used (None: the bundled presets)."""
    cv: dict[str, Any] | None = None
    """Cross-validation results (see ``cross_validate``)."""
    transferred: dict[str, dict[str, float]] = field(default_factory=dict)
    """Hardware without rows: values from the fleet prior (see ``transfer_prior``)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "data": self.data, "date": self.date, "rows": self.rows, "parameters": self.parameters,
            "hardware": self.hardware, "presets": self.presets, "initial": self.initial, "skipped": self.skipped,
            "reference_round": self.reference_round, "before": self.before, "after": self.after,
            "by_owner": self.by_owner, "seconds": self.seconds, "evaluations": self.evaluations,
            "predictions": self.predictions, "message": self.message,
            "excluded": [{"version": r.version, "hardware": r.hardware, "model": r.model, "scenario": r.scenario,
                          "accelerators": r.accelerators, "reason": why} for r, why in self.excluded],
            "cv": self.cv, "row_errors": self.row_errors,
        }

    def to_table(self) -> str:
        f = lambda x: "-" if x is None else f"{x:.1f}"  # noqa: E731
        lines = [f"data: {self.data}   frontier rows fitted: {self.rows}   parameters: {len(self.parameters)}   "
                 f"time: {self.seconds:.1f} s ({self.evaluations} evaluations, {self.predictions} predictions)",
                 f"fit median APE {f(self.before['median_ape'])} % -> {f(self.after['median_ape'])} %, "
                 f"p90 {f(self.before['p90_ape'])} % -> {f(self.after['p90_ape'])} %   ({self.message})", ""]
        lines.append(f"{'parameter':<40}{'initial':>10}{'fitted':>10}")
        for owner, vals in {**self.hardware, **self.presets}.items():
            for name, v in vals.items():
                label = f"{owner}.{name}"
                lines.append(f"{label:<40}{self.initial[label]:>10.4g}{v:>10.4g}")
        if self.reference_round:
            lines.append(f"(round {self.reference_round} maturity fixed as the reference)")
        for owner, why in self.skipped.items():
            lines.append(f"{owner}: kept defaults ({why})")
        if self.cv:
            lines += ["", format_cv(self.cv)]
        return "\n".join(lines)


def _round_sig(x: float, digits: int = SIGNIFICANT_DIGITS) -> float:
    if x == 0 or not math.isfinite(x):
        return float(x)
    return float(f"{x:.{digits}g}")


def _owner_values(params: Sequence[Parameter], theta: np.ndarray) -> tuple[dict[str, Values], dict[str, Values]]:
    hw: dict[str, list] = {}
    rnd: dict[str, list] = {}
    for p, v in zip(params, theta):
        (hw if p.kind == "hardware" else rnd).setdefault(p.owner, []).append((p.name, float(v)))
    return ({k: tuple(sorted(v)) for k, v in hw.items()}, {k: tuple(sorted(v)) for k, v in rnd.items()})


def _fit_rows(rows: Sequence[Row], hardware_ids: Iterable[str] | None, presets_dir) -> tuple[list[_FitRow], list]:
    rows = list(rows)
    front = frontier_mask(rows)
    wanted = set(hardware_ids) if hardware_ids is not None else None
    out, bad = [], []
    for r, is_front in zip(rows, front):
        if not is_front or (wanted is not None and r.hardware not in wanted):
            continue
        try:
            preset = resolve_preset(r.version, presets_dir)
        except SpecError as exc:
            bad.append((r, f"bad input: version '{r.version}': {exc.detail}"))
            continue
        out.append(_FitRow(r, PredictionKey(preset, r.hardware, r.model, r.scenario_id, r.accelerators)))
    return out, bad


def data_label(file: str) -> str:
    """Provenance label of a data file: its name and the first 12 hex digits of its SHA-256."""
    import hashlib

    path = Path(file)
    if not path.is_file():
        return file
    return f"{path.name} (sha256 {hashlib.sha256(path.read_bytes()).hexdigest()[:12]})"


def _check_names(parameters: Sequence[str], round_parameters: Sequence[str]) -> None:
    for name in parameters:
        if name not in CALIBRATABLE_EFFICIENCY:
            raise SpecError(f"'{name}' is not a calibratable efficiency parameter "
                            f"(calibratable: {', '.join(CALIBRATABLE_EFFICIENCY)})")
    for name in round_parameters:
        if name not in ROUND_PARAMETERS:
            raise SpecError(f"'{name}' is not a round parameter (round parameters: {', '.join(ROUND_PARAMETERS)})")


def _evaluate(ev: _Evaluator, fit: Sequence[_FitRow], hw_vals: dict[str, Values], rnd_vals: dict[str, Values],
              locks: dict[PredictionKey, Lock] | None = None):
    tasks = [(fr.key, hw_vals.get(fr.key.hardware, ()), rnd_vals.get(fr.key.preset, ()),
              locks.get(fr.key) if locks else None) for fr in fit]
    ev.prefetch(tasks)
    return [ev.predict(*t) for t in tasks]


_POOL_EVALUATOR: _Evaluator | None = None
"""The evaluator forked worker processes inherit (set just before the pool starts)."""


def _pool_predict(task):
    return _POOL_EVALUATOR.predict(*task)


def _apes(fit: Sequence[_FitRow], values: Sequence[float | None]) -> list[float]:
    return [abs(v - fr.row.tokens_per_s) / fr.row.tokens_per_s * 100 for fr, v in zip(fit, values) if v is not None]


class _GroupedJacobian:
    """Forward-difference Jacobian that perturbs columns with disjoint row support together.

    A row depends only on its own hardware's and round's parameters, so e.g. every hardware's
    ``compute_fraction`` can be stepped in one evaluation. The step is absolute in the [0, 1]
    scaled space (``diff_step`` of the parameter's range), taken downwards near the upper bound.
    """

    def __init__(self, fun: Callable[[np.ndarray], np.ndarray], support: np.ndarray, step: float):
        self.fun = fun
        self.support = support
        self.step = float(step)
        groups: list[list[int]] = []
        used: list[np.ndarray] = []
        for j in range(support.shape[1]):
            for g, rows in zip(groups, used):
                if not np.any(rows & support[:, j]):
                    g.append(j)
                    rows |= support[:, j]
                    break
            else:
                groups.append([j])
                used.append(support[:, j].copy())
        self.groups = groups

    @property
    def n_groups(self) -> int:
        return len(self.groups)

    def __call__(self, x: np.ndarray, f0: np.ndarray | None = None) -> np.ndarray:
        if f0 is None:
            f0 = self.fun(x)
        jac = np.zeros((len(f0), len(x)))
        for g in self.groups:
            h = np.zeros_like(x)
            for j in g:
                h[j] = self.step if x[j] + self.step <= 1.0 else -self.step
            df = self.fun(x + h) - f0
            for j in g:
                jac[:, j] = np.where(self.support[:, j], df / h[j], 0.0)
        return jac


def calibrate(rows: Sequence[Row] | str | os.PathLike, hardware_ids: Iterable[str] | None = None, *,
              fit_rounds: bool = True, parameters: Sequence[str] = DEFAULT_PARAMETERS,
              round_parameters: Sequence[str] = ROUND_PARAMETERS, min_rows: int = 3, max_nfev: int = 30,
              prior_weight: float = 0.05, f_scale: float = 0.25, diff_step: float = 0.05,
              pin_choices: bool = True, cv: bool = False, cv_max_nfev: int | None = 8,
              presets_dir: str | os.PathLike | None = None, log: Callable[[str], None] | None = None,
              workers: int | None = None, transfer: bool = True,
              _evaluator: _Evaluator | None = None) -> CalibrationResult:
    """Fit hardware efficiencies (and round maturities) to the frontier rows of ``rows``.

    Parameters
    ----------
    rows : rows from :func:`infersim.validation.load_rows` (or a CSV path). Only frontier rows
        (best published result per version, hardware, model, scenario, accelerators) are fitted.
    hardware_ids : fit only rows of these hardware profiles (default: every hardware in the rows).
    fit_rounds : also fit ``round_parameters`` of each round preset with rows, except the
        reference round (the one with most rows), whose maturity anchors the shared scale.
    parameters : efficiency fields fitted per hardware (a subset of ``CALIBRATABLE_EFFICIENCY``).
    min_rows : a hardware (or round) with fewer usable frontier rows keeps its defaults.
    max_nfev : optimizer iterations limit (scipy ``max_nfev``; Jacobian evaluations not counted).
    prior_weight : weight of a ridge term pulling each parameter to its starting value, per unit
        of its bounds' range; keeps parameters the data cannot see at their documented defaults.
    f_scale : soft_l1 scale in log units (0.25 ≈ 28 % error): larger residuals count ~linearly.
    diff_step : finite-difference step as a fraction of each parameter's bounds range (the
        prediction is piecewise smooth: batch sizes jump where SLO limits bind).
    pin_choices : evaluate the optimizer's trial points with each key's optional round
        transforms (MTP, disaggregation, …) pinned to what the full search chose at the start;
        the final numbers re-run the full search, and the fit is repeated once if the choices changed.
    cv : also run :func:`cross_validate` (with ``cv_max_nfev`` iterations per fold).
    presets_dir : presets folder (default: the bundled presets).
    log : called with progress messages.
    workers : processes for predictions (default: one per CPU, at most 4, for large fits).
    transfer : give every bundled hardware without rows the fleet prior (``transfer_prior``).

    Returns
    -------
    CalibrationResult (nothing is written; see :func:`write`).

    Notes
    -----
    Residual per frontier row i: r_i = log(pred_i(θ) / published_i); plus
    prior_weight · (x_j − x_j0) per parameter, with x the parameter scaled to [0, 1] over its
    bounds. Minimised with ``scipy.optimize.least_squares(method="trf", loss="soft_l1")``; the
    finite-difference Jacobian uses the sparsity pattern (a row depends only on its own
    hardware's and round's parameters), so one Jacobian costs about
    len(parameters) + len(round_parameters) residual evaluations.
    """
    from scipy.optimize import least_squares

    start = time.perf_counter()
    say = log or (lambda msg: None)
    if isinstance(rows, (str, os.PathLike)):
        rows = load_rows(rows)
    rows = list(rows)
    data = data_label(rows[0].file) if rows else "<memory>"
    _check_names(parameters, round_parameters if fit_rounds else ())
    if hardware_ids is not None:
        from .specs import catalog

        hardware_ids = [catalog.profile_id("hardware", h) for h in hardware_ids]

    owned = _evaluator is None
    tmp = tempfile.TemporaryDirectory(prefix="infersim-calibrate-") if owned else None
    ev = _evaluator or _Evaluator(presets_dir, Path(tmp.name))
    try:
        fit, excluded = _fit_rows(rows, hardware_ids, presets_dir)
        if owned:
            ev.start_pool(_default_workers(len(fit)) if workers is None else workers)
        # rows that cannot be predicted at the starting values are left out, with their reason
        keep, base_values = [], {}
        for fr, (value, reason, _) in zip(fit, _evaluate(ev, fit, {}, {})):
            if value is None:
                excluded.append((fr.row, reason))
            else:
                keep.append(fr)
                base_values[fr.key] = value
        fit = keep
        before_med, before_p90 = _stats(_apes(fit, [base_values[fr.key] for fr in fit]))

        # which owners have enough rows
        skipped: dict[str, str] = {}
        hw_counts: dict[str, int] = {}
        for fr in fit:
            hw_counts[fr.key.hardware] = hw_counts.get(fr.key.hardware, 0) + 1
        for h in hardware_ids or ():
            if h not in hw_counts:
                skipped[h] = "no usable frontier rows"
        params: list[Parameter] = []
        for h in sorted(hw_counts):
            if hw_counts[h] < min_rows:
                skipped[h] = f"{hw_counts[h]} frontier row(s) < min_rows={min_rows}"
                continue
            eff = ev.base_hardware(h).efficiency
            for name in parameters:
                lo, hi = BOUNDS[name]
                params.append(Parameter("hardware", h, name, lo, hi, float(np.clip(getattr(eff, name), lo, hi))))
        reference = None
        if fit_rounds and round_parameters:
            rd_counts: dict[str, int] = {}
            for fr in fit:
                rd_counts[fr.key.preset] = rd_counts.get(fr.key.preset, 0) + 1
            eligible = [r for r in rd_counts if rd_counts[r] >= min_rows]
            for r in rd_counts:
                if r not in eligible:
                    skipped[r] = f"{rd_counts[r]} frontier row(s) < min_rows={min_rows}"
            if eligible:
                reference = max(eligible, key=lambda r: (rd_counts[r], r))
                skipped[reference] = "reference round (maturity fixed)"
                for r in sorted(eligible):
                    if r == reference:
                        continue
                    preset = ev.base_preset(r)
                    for name in round_parameters:
                        lo, hi = BOUNDS[name]
                        params.append(Parameter("preset", r, name, lo, hi, float(np.clip(getattr(preset, name), lo, hi))))

        lower = np.array([p.lower for p in params])
        span = np.array([p.upper - p.lower for p in params])
        x0 = (np.array([p.initial for p in params]) - lower) / np.where(span > 0, span, 1.0) if params else np.zeros(0)
        published = np.array([fr.row.tokens_per_s for fr in fit])
        locks: dict[PredictionKey, Lock] = {}
        if pin_choices:
            locks = {fr.key: ev.lock_for(fr.key, sig) for fr, (_, _, sig) in zip(fit, _evaluate(ev, fit, {}, {}))}
        n_eval = 0

        def theta_of(x):
            return lower + np.clip(x, 0.0, 1.0) * span

        def residuals(x):
            nonlocal n_eval
            n_eval += 1
            hw_vals, rnd_vals = _owner_values(params, theta_of(x))
            preds = _evaluate(ev, fit, hw_vals, rnd_vals, locks)
            values = np.array([v if v is not None else np.nan for v, _, _ in preds])
            r = np.where(np.isfinite(values), np.log(np.where(np.isfinite(values), values, 1.0) / published),
                         INFEASIBLE_RESIDUAL)
            return np.concatenate([r, prior_weight * (x - x0)])

        message = "no free parameters"
        x = x0.copy()
        if params and fit:
            support = np.zeros((len(fit) + len(params), len(params)), dtype=bool)
            for i, fr in enumerate(fit):
                for j, p in enumerate(params):
                    support[i, j] = (p.kind == "hardware" and p.owner == fr.key.hardware) or \
                        (p.kind == "preset" and p.owner == fr.key.preset)
            support[len(fit):, :] = np.eye(len(params), dtype=bool)
            jacobian = _GroupedJacobian(residuals, support, diff_step)
            for outer in range(2):
                say(f"fitting {len(params)} parameters on {len(fit)} frontier rows "
                    f"({jacobian.n_groups} evaluations per Jacobian; pass {outer + 1})")
                res = least_squares(residuals, x, jac=jacobian, bounds=(0.0, 1.0), method="trf", loss="soft_l1",
                                    f_scale=f_scale, x_scale=1.0, max_nfev=max_nfev, ftol=1e-4, xtol=1e-4,
                                    gtol=1e-6, tr_solver="exact")
                x = res.x
                message = res.message
                if not pin_choices:
                    break
                hw_vals, rnd_vals = _owner_values(params, theta_of(x))
                new = {fr.key: ev.lock_for(fr.key, sig)
                       for fr, (_, _, sig) in zip(fit, _evaluate(ev, fit, hw_vals, rnd_vals))}
                if new == locks:
                    break
                locks = new

        theta = np.array([_round_sig(v) for v in theta_of(x)])
        theta = np.clip(theta, lower, lower + span) if params else theta
        hw_vals, rnd_vals = _owner_values(params, theta)
        final = _evaluate(ev, fit, hw_vals, rnd_vals)
        after_values = [v for v, _, _ in final]
        after_med, after_p90 = _stats(_apes(fit, after_values))

        by_owner: dict[str, dict[str, Any]] = {}
        for kind, attr in (("hardware", "hardware"), ("preset", "preset")):
            for owner in sorted({getattr(fr.key, attr) for fr in fit}):
                idx = [i for i, fr in enumerate(fit) if getattr(fr.key, attr) == owner]
                apes = _apes([fit[i] for i in idx], [after_values[i] for i in idx])
                by_owner[owner] = {"kind": kind, "rows": len(idx), "median_ape": _stats(apes)[0],
                                   "n_failed": len(idx) - len(apes)}
        row_errors = []
        for fr, v in zip(fit, after_values):
            b = base_values[fr.key]
            row_errors.append({"version": fr.row.version, "hardware": fr.row.hardware, "model": fr.row.model,
                               "scenario": fr.row.scenario, "accelerators": fr.row.accelerators,
                               "published": fr.row.tokens_per_s, "predicted_before": b, "predicted_after": v,
                               "error_pct_after": None if v is None else (v / fr.row.tokens_per_s - 1) * 100})
        hardware_out: dict[str, dict[str, float]] = {}
        presets_out: dict[str, dict[str, float]] = {}
        for p, v in zip(params, theta):
            (hardware_out if p.kind == "hardware" else presets_out).setdefault(p.owner, {})[p.name] = float(v)
        from .specs import catalog

        result = CalibrationResult(
            hardware=hardware_out, presets=presets_out, initial={p.label: p.initial for p in params},
            parameters=[p.label for p in params], skipped=skipped, reference_round=reference, rows=len(fit),
            excluded=excluded, before={"median_ape": before_med, "p90_ape": before_p90},
            after={"median_ape": after_med, "p90_ape": after_p90}, by_owner=by_owner, row_errors=row_errors,
            data=data, date=_dt.date.today().isoformat(), seconds=time.perf_counter() - start, evaluations=n_eval,
            predictions=ev.calls, message=message,
            hardware_files={h: str(catalog.resolve("hardware", h)) for h in hardware_out},
            presets_dir=str(presets_dir) if presets_dir is not None else None)
        if transfer:
            from .specs import catalog as _catalog

            for hw_id in _catalog.list_ids("hardware"):
                if hw_id not in hardware_out and hardware_out:
                    result.transferred[hw_id] = transfer_prior(result, hw_id)
        say(f"fit done in {result.seconds:.1f} s ({n_eval} evaluations): frontier median APE "
            f"{before_med or 0:.1f} % -> {after_med or 0:.1f} %")
        if cv:
            result.cv = cross_validate(rows, hardware_ids, fit_rounds=fit_rounds, parameters=parameters,
                                       round_parameters=round_parameters, min_rows=min_rows,
                                       max_nfev=cv_max_nfev or max_nfev, prior_weight=prior_weight, f_scale=f_scale,
                                       diff_step=diff_step, pin_choices=pin_choices, presets_dir=presets_dir, log=log,
                                       _evaluator=ev)
        return result
    finally:
        if owned:
            ev.close()
            tmp.cleanup()


def _default_workers(n_rows: int) -> int:
    from .validation import default_workers

    return default_workers(n_rows)


# ---------------------------------------------------------------------------------------------
# Cross-validation


SCALE_PARAMETERS = ("compute_fraction", "memory_fraction", "kv_memory_fraction", "attention_fraction")
"""Fractions transferred as ratios to each hardware's own spec-sheet default; the others as values."""


def transfer_prior(result: CalibrationResult, hw_id: str) -> dict[str, float]:
    """Efficiencies for hardware the data does not cover: the fleet's calibrated-to-default ratio.

    Notes
    -----
    For a fraction p (compute, memory, attention): p_new = p_default(hw) · median_h(p_fit(h) / p_default(h))
    over the fitted hardware h, clipped to the parameter's bounds — the spec-sheet number stays the
    hardware's own, the end-to-end derating is the fleet's. Other parameters (small-GEMM knee,
    step overhead) take the fleet median. This is also how leave-one-hardware-out CV predicts the
    held-out hardware, so the CV figure measures exactly this rule.
    """
    from .specs import catalog

    default = catalog.load("hardware", hw_id).efficiency
    names = sorted({n for v in result.hardware.values() for n in v})
    out = {}
    for name in names:
        fitted = [(h, v[name]) for h, v in result.hardware.items() if name in v]
        if not fitted:
            continue
        if name in SCALE_PARAMETERS:
            ratios = [val / result.initial[f"{h}.{name}"] for h, val in fitted if result.initial.get(f"{h}.{name}")]
            value = getattr(default, name) * float(np.median(ratios))
        else:
            value = float(np.median([val for _, val in fitted]))
        lo, hi = BOUNDS.get(name, (-np.inf, np.inf))
        out[name] = _round_sig(float(np.clip(value, lo, hi)))
    return out


def _held_out(ev: _Evaluator, result: CalibrationResult, test: Sequence[_FitRow]) -> list[dict[str, Any]]:
    hw_vals = {h: tuple(sorted(v.items())) for h, v in result.hardware.items()}
    for h in {fr.row.hardware for fr in test} - set(hw_vals):  # held-out hardware: the fleet prior
        try:
            hw_vals[h] = tuple(sorted(transfer_prior(result, h).items()))
        except SpecError:
            pass
    rnd_vals = {r: tuple(sorted(v.items())) for r, v in result.presets.items()}
    after = _evaluate(ev, test, hw_vals, rnd_vals)
    before = _evaluate(ev, test, {}, {})
    out = []
    for fr, (va, ra, _), (vb, _, _) in zip(test, after, before):
        out.append({"row": fr.row, "predicted": va, "default": vb, "reason": ra})
    return out


def _fold_stats(items: list[dict[str, Any]]) -> dict[str, Any]:
    ape = [abs(i["predicted"] / i["row"].tokens_per_s - 1) * 100 for i in items if i["predicted"] is not None]
    base = [abs(i["default"] / i["row"].tokens_per_s - 1) * 100 for i in items if i["default"] is not None]
    med, p90 = _stats(ape)
    bmed, bp90 = _stats(base)
    return {"rows": len(items), "n_failed": len(items) - len(ape), "median_ape": med, "p90_ape": p90,
            "uncalibrated_median_ape": bmed, "uncalibrated_p90_ape": bp90}


def cross_validate(rows: Sequence[Row] | str | os.PathLike, hardware_ids: Iterable[str] | None = None, *,
                   folds: Sequence[str] = ("round", "hardware"), fit_rounds: bool = True, min_rows: int = 3,
                   max_nfev: int = 8, log: Callable[[str], None] | None = None, workers: int | None = None,
                   presets_dir: str | os.PathLike | None = None, _evaluator: _Evaluator | None = None,
                   **fit_kwargs) -> dict[str, Any]:
    """Held-out error: leave one round out and leave one hardware out.

    For each fold, parameters are fitted (``calibrate``) on the other rows and the held-out
    frontier rows are predicted: a held-out round keeps its preset's maturity values, a held-out
    hardware gets the fleet prior of ``transfer_prior`` from the other hardware's fit (its own
    spec-sheet defaults scaled by the fleet's calibrated/default ratios), as new hardware would.

    Returns
    -------
    dict with ``leave_one_round_out`` and/or ``leave_one_hardware_out``, each holding pooled
    ``rows, n_failed, median_ape, p90_ape`` over all held-out frontier rows (and the same for
    the uncalibrated model, ``uncalibrated_*``), ``folds`` (per held-out round / hardware),
    ``max_nfev`` and ``seconds``.
    """
    if isinstance(rows, (str, os.PathLike)):
        rows = load_rows(rows)
    rows = list(rows)
    say = log or (lambda msg: None)
    owned = _evaluator is None
    tmp = tempfile.TemporaryDirectory(prefix="infersim-cv-") if owned else None
    ev = _evaluator or _Evaluator(presets_dir, Path(tmp.name))
    try:
        fit_all, _ = _fit_rows(rows, hardware_ids, presets_dir)
        if owned:
            ev.start_pool(_default_workers(len(fit_all)) if workers is None else workers)
        out: dict[str, Any] = {}
        for kind in folds:
            if kind not in ("round", "hardware"):
                raise SpecError(f"unknown fold kind '{kind}' (expected round or hardware)")
            t0 = time.perf_counter()
            attr = "version" if kind == "round" else "hardware"
            groups: dict[str, list[_FitRow]] = {}
            for fr in fit_all:
                groups.setdefault(getattr(fr.row, attr), []).append(fr)
            fold_out, pooled = {}, []
            for name in sorted(groups):
                test = groups[name]
                if len(test) < min_rows and kind == "hardware":
                    continue
                train = [r for r in rows if getattr(r, attr) != name]
                say(f"cv: leave out {kind} {name} ({len(test)} frontier rows)")
                res = calibrate(train, hardware_ids, fit_rounds=fit_rounds, transfer=False, min_rows=min_rows, max_nfev=max_nfev,
                                presets_dir=presets_dir, _evaluator=ev, **fit_kwargs)
                items = _held_out(ev, res, test)
                pooled += items
                fold_out[name] = {**_fold_stats(items), "fit_rows": res.rows, "fit_median_ape": res.after["median_ape"],
                                  "fit_seconds": res.seconds}
            out[f"leave_one_{kind}_out"] = {**_fold_stats(pooled), "folds": fold_out, "max_nfev": max_nfev,
                                           "seconds": time.perf_counter() - t0}
        return out
    finally:
        if owned:
            ev.close()
            tmp.cleanup()


def format_cv(cv: dict[str, Any]) -> str:
    """A plain-text table of cross-validation results."""
    f = lambda x: "-" if x is None else f"{x:.1f}"  # noqa: E731
    lines = []
    for kind, block in cv.items():
        lines.append(f"{kind.replace('_', ' ')} (held-out frontier rows, max_nfev {block['max_nfev']}, "
                     f"{block['seconds']:.0f} s)")
        lines.append(f"  {'held out':<14}{'rows':>6}{'median APE %':>14}{'p90 APE %':>11}{'uncalibrated med %':>20}")
        for name, s in block["folds"].items():
            lines.append(f"  {name:<14}{s['rows']:>6}{f(s['median_ape']):>14}{f(s['p90_ape']):>11}"
                         f"{f(s['uncalibrated_median_ape']):>20}")
        lines.append(f"  {'pooled':<14}{block['rows']:>6}{f(block['median_ape']):>14}{f(block['p90_ape']):>11}"
                     f"{f(block['uncalibrated_median_ape']):>20}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Writing fitted values


def _record(result: CalibrationResult, owner: str, names: Iterable[str]) -> dict[str, Any]:
    info = result.by_owner.get(owner, {})
    med = info.get("median_ape")
    return {"data": result.data, "date": result.date, "rows": int(info.get("rows", result.rows)),
            "residual_median_ape": _round_sig(med) if med is not None else 0.0, "parameters": list(names)}


def _fmt_value(v: float) -> str:
    text = yaml.safe_dump(float(v)).strip()
    return text.removesuffix("\n...").strip()


_LINE = re.compile(r"^(?P<indent>[ ]*)(?P<key>[A-Za-z_][\w-]*):(?P<rest>.*)$")


def _split_comment(rest: str) -> tuple[str, str]:
    """Split ' value   # comment' into (value, '   # comment'), outside quotes."""
    quote = None
    for i, ch in enumerate(rest):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or rest[i - 1] in " \t"):
            j = i
            while j > 0 and rest[j - 1] in " \t":
                j -= 1
            return rest[:j], rest[j:]
    return rest.rstrip(), ""


def _calibrated_comment(old_value: str, comment: str) -> str:
    """Comment for a fitted value: it is calibrated, and what the documented default was."""
    text = comment.strip().lstrip("#").strip()
    text = re.sub(r"^calibrated; default [^,]*(, )?", "", text)  # recalibration keeps the original default
    prior = re.match(r"^calibrated; default ([^,]*)", comment.strip().lstrip("#").strip())
    default = prior.group(1) if prior else old_value.strip()
    return f"  # calibrated; default {default}" + (f", {text}" if text else "")


def _edit_mapping(lines: list[str], start: int, end: int, indent: str, updates: dict[str, float],
                  record: dict[str, Any]) -> list[str]:
    """Set ``updates`` and replace the ``calibration`` record inside lines[start:end] (one mapping at ``indent``)."""
    body = lines[start:end]
    # drop an existing calibration block
    out, i = [], 0
    while i < len(body):
        m = _LINE.match(body[i])
        if m and m["indent"] == indent and m["key"] == "calibration":
            i += 1
            while i < len(body) and (not body[i].strip() or len(body[i]) - len(body[i].lstrip(" ")) > len(indent)):
                i += 1
            continue
        out.append(body[i])
        i += 1
    body = out
    pending = dict(updates)
    for k, line in enumerate(body):
        m = _LINE.match(line)
        if m and m["indent"] == indent and m["key"] in pending:
            value, comment = _split_comment(m["rest"])
            body[k] = f"{indent}{m['key']}: {_fmt_value(pending.pop(m['key']))}{_calibrated_comment(value, comment)}"
    # new keys and the record go after the mapping's last non-blank line
    last = len(body)
    while last > 0 and not body[last - 1].strip():
        last -= 1
    extra = [f"{indent}{k}: {_fmt_value(v)}" for k, v in pending.items()]
    rec = yaml.safe_dump({"calibration": record}, sort_keys=False, default_flow_style=False, width=1000)
    extra += [indent + ln for ln in rec.rstrip("\n").split("\n")]
    body = body[:last] + extra + body[last:]
    return lines[:start] + body + lines[end:]


def _edit_text(text: str, section: str | None, updates: dict[str, float], record: dict[str, Any]) -> str:
    """Edit YAML text line by line, keeping comments; ``section`` is a top-level mapping key or None."""
    lines = text.split("\n")
    trailing = text.endswith("\n")
    if trailing:
        lines = lines[:-1]
    if section is None:
        return "\n".join(_edit_mapping(lines, 0, len(lines), "", updates, record)) + "\n"
    head = next((i for i, ln in enumerate(lines) if (m := _LINE.match(ln)) and m["indent"] == "" and m["key"] == section),
                None)
    if head is None:
        block = [f"{section}:"] + [f"  {k}: {_fmt_value(v)}" for k, v in updates.items()]
        rec = yaml.safe_dump({"calibration": record}, sort_keys=False, default_flow_style=False, width=1000)
        block += ["  " + ln for ln in rec.rstrip("\n").split("\n")]
        return "\n".join(lines + block) + "\n"
    value, _ = _split_comment(_LINE.match(lines[head])["rest"])
    if value.strip():
        raise ValueError("flow-style section")  # e.g. `efficiency: {...}`: the caller re-dumps
    end = head + 1  # the section runs over blank and indented lines
    while end < len(lines) and (not lines[end].strip() or lines[end][0] in " \t"):
        end += 1
    while end > head + 1 and not lines[end - 1].strip():
        end -= 1
    child = next((lines[i] for i in range(head + 1, end) if lines[i].strip() and not lines[i].lstrip().startswith("#")),
                 None)
    indent = " " * (len(child) - len(child.lstrip(" "))) if child else "  "
    return "\n".join(_edit_mapping(lines, head + 1, end, indent, updates, record)) + "\n"


def _expected(data: dict, section: str | None, updates: dict[str, float], record: dict[str, Any]) -> dict:
    import copy

    new = copy.deepcopy(data)
    target = new if section is None else new.setdefault(section, {})
    target.update(updates)
    target["calibration"] = record
    return new


def _updated_yaml(path: Path, section: str | None, updates: dict[str, float], record: dict[str, Any],
                  spec_cls) -> tuple[str, bool]:
    """New text for ``path`` (comments kept when the line edit verifies; else a re-dump)."""
    from .specs._base import read_yaml, validate_data

    text = path.read_text(encoding="utf-8")
    data = read_yaml(path)
    want = _expected(data, section, updates, record)
    kept = True
    try:
        new = _edit_text(text, section, updates, record)
        if _normalise(yaml.safe_load(new)) != _normalise(want):
            raise ValueError("line edit did not reproduce the data")
    except (ValueError, yaml.YAMLError, TypeError, KeyError):
        new = f"# Written by infersim calibrate; re-dumped from {path.name} (its comments were not kept).\n" + \
              yaml.safe_dump(want, sort_keys=False, allow_unicode=True, width=100)
        kept = False
    validate_data(spec_cls, yaml.safe_load(new), file=str(path))
    return new, kept


def _normalise(obj):
    if isinstance(obj, dict):
        return {k: _normalise(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_normalise(v) for v in obj]
    if isinstance(obj, (_dt.date, _dt.datetime)):
        return obj.isoformat()
    if isinstance(obj, float):
        return round(obj, 12)
    return obj


def write(result: CalibrationResult, out_dir: str | os.PathLike | None = None, *, in_place: bool = False) -> list[Path]:
    """Write fitted values with a ``calibration:`` provenance record.

    Parameters
    ----------
    result : from :func:`calibrate`.
    out_dir : folder for the written copies (default ``./calibrated``): ``OUT/hardware_profiles/ID.yaml``
        and ``OUT/presets/vX.Y.yaml`` — usable as ``--profiles-dir OUT`` and ``presets_dir=OUT/presets``.
    in_place : overwrite the source profile and preset files instead (the files ``result``
        was fitted from); only when asked. Not combinable with ``out_dir``. Hardware without
        rows (``result.transferred``) is written only to copies, never in place.

    Returns
    -------
    list of written paths. Every file is written atomically (temporary file, then rename).

    Notes
    -----
    Values are edited line by line, so comments and layout survive; the record replaces an
    existing ``calibration:`` block. If a file's layout defeats the line edit (e.g. a flow-style
    ``efficiency: {...}``), the file is re-dumped from its data and its comments are lost (a
    header line says so). Each written file is re-validated before it replaces anything.
    """
    from .optimizations.presets import PresetSpec
    from .optimizations.presets import presets_dir as bundled_presets
    from .specs import catalog

    if in_place and out_dir is not None:
        raise SpecError("give either an output folder or in_place, not both")
    written: list[Path] = []
    src_presets = Path(result.presets_dir) if result.presets_dir else bundled_presets()
    target_root = None if in_place else Path(out_dir if out_dir is not None else "calibrated")
    plans = []
    for hw_id, values in result.hardware.items():
        src = Path(result.hardware_files.get(hw_id) or catalog.resolve("hardware", hw_id))
        dst = src if in_place else target_root / "hardware_profiles" / src.name
        plans.append((src, dst, "efficiency", values, _record(result, hw_id, values), HardwareSpec))
    # fleet-prior values go to copies only: in place, only the files the fit read are touched
    for hw_id, values in ({} if in_place else result.transferred).items():
        src = Path(catalog.resolve("hardware", hw_id))
        dst = src if in_place else target_root / "hardware_profiles" / src.name
        record = {"data": f"fleet prior from {result.data} (no rows for this hardware)", "date": result.date, "rows": 0,
                  "residual_median_ape": _round_sig(result.after["median_ape"] or 0.0), "parameters": list(values)}
        plans.append((src, dst, "efficiency", values, record, HardwareSpec))
    for rnd, values in result.presets.items():
        src = src_presets / f"{rnd}.yaml"
        dst = src if in_place else target_root / "presets" / src.name
        plans.append((src, dst, None, values, _record(result, rnd, values), PresetSpec))
    texts = []
    for src, dst, section, values, record, cls in plans:  # all files verified before any is written
        new, _ = _updated_yaml(src, section, values, record, cls)
        texts.append((dst, new))
    for dst, new in texts:
        written.append(_atomic_write(dst, new.encode("utf-8")))
    if not in_place and target_root is not None and result.presets and result.presets_dir is None:
        # a usable presets folder: the rounds not fitted are copied unchanged
        for p in sorted(src_presets.glob("v*.yaml")):
            dst = target_root / "presets" / p.name
            if not dst.exists():
                shutil.copyfile(p, dst)
                written.append(dst)
    return written


__all__ = ["DEFAULT_PARAMETERS", "ROUND_PARAMETERS", "BOUNDS", "Parameter", "CalibrationResult", "calibrate",
           "cross_validate", "format_cv", "write", "transfer_prior"]
