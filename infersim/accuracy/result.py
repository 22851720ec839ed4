"""The outcome of a calibration: fitted values, errors before and after, findings, provenance."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .data import Row


@dataclass
class CalibrationResult:
    """Fitted values, the fit's residual error, bound findings and (optionally) cross-validation.

    Percentages are absolute percentage errors of frontier rows, %.
    """

    hardware: dict[str, dict[str, float]]
    """Fitted efficiency values per hardware ID (4 significant digits)."""
    presets: dict[str, dict[str, float]]
    """Fitted maturity factors per preset round (monotone in round order)."""
    initial: dict[str, float]
    """Starting value per fitted value label ``owner.name``."""
    defaults: dict[str, float]
    """Documented (spec-sheet) default per fitted value label; the weak prior pulls towards it."""
    parameters: list[str]
    """Labels of the fitted values, ``owner.name``."""
    skipped: dict[str, str]
    """Owners (hardware IDs, rounds) left unchanged, with the reason."""
    reference_round: str | None
    """Round whose maturity stays fixed (anchors the scale shared with hardware efficiencies)."""
    rows: int
    """Frontier rows used in the fit."""
    excluded: list[tuple[Row, str]]
    """Frontier rows not used: not predictable at the starting values, with the reason."""
    before: dict[str, float | None]
    """median_ape / p90_ape of the fit rows at the starting values."""
    after: dict[str, float | None]
    """median_ape / p90_ape of the fit rows at the fitted values (full search, nothing pinned)."""
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
    """Residual-vector evaluations (finite-difference Jacobian columns included)."""
    predictions: int
    """Distinct predictions made (cache misses)."""
    message: str
    """Optimizer status."""
    stopped_by_budget: bool = False
    """The optimizer stopped at its iteration budget (scipy ``least_squares`` status 0), not at a
    tolerance: the values are where the budget left them."""
    findings: list[dict[str, Any]] = field(default_factory=list)
    """Fitted values on (or within 1 % of) a bound of their documented range, and rounds out of order."""
    notes: list[str] = field(default_factory=list)
    """Start values moved into their range or into round order before the fit."""
    hardware_files: dict[str, str] = field(default_factory=dict)
    """Profile file each fitted hardware was read from (``write(in_place=True)`` targets these)."""
    presets_dir: str | None = None
    """Presets folder used (None: the bundled presets)."""
    scope: list[str] | None = None
    """Hardware IDs the fit was restricted to (None: every hardware with rows, and the rounds)."""
    round_values: dict[str, dict[str, float]] = field(default_factory=dict)
    """Every round factor the final predictions used (fitted, reference and unchanged rounds)."""
    held_factors: dict[str, set[str]] = field(default_factory=dict)
    """Per fitted round, the factors no row of it exercised, held by rule and not fitted (a round
    without MoE rows keeps its documented MoE step, else its dense maturity, as its MoE factor,
    ``fit.moe_without_evidence``)."""
    hardware_values: dict[str, dict[str, float]] = field(default_factory=dict)
    """Every hardware's efficiency values the final predictions used (fitted or start values)."""
    cv: dict[str, Any] | None = None
    """Cross-validation results (see ``cross_validate``)."""
    transferred: dict[str, dict[str, float]] = field(default_factory=dict)
    """Hardware without enough rows: values from the fleet prior (see ``transfer_prior``)."""
    transfer_reasons: dict[str, str] = field(default_factory=dict)
    """Why each transferred hardware has no fit of its own."""
    op_errors: list[dict[str, Any]] = field(default_factory=list)
    """Per fitted operating point: its steady occupancy and TPOT p50 (``oppoints.steady_point``), the model's TPOT there after the fit."""

    def owner_findings(self, owner: str) -> list[str]:
        """Finding texts about one hardware ID or round."""
        return [f["text"] for f in self.findings if f["parameter"].startswith(f"{owner}.")]

    def to_dict(self) -> dict[str, Any]:
        return {
            "data": self.data, "date": self.date, "rows": self.rows, "parameters": self.parameters,
            "scope": self.scope, "hardware": self.hardware, "presets": self.presets, "initial": self.initial,
            "defaults": self.defaults, "skipped": self.skipped, "reference_round": self.reference_round,
            "before": self.before, "after": self.after, "findings": self.findings, "notes": self.notes,
            "by_owner": self.by_owner, "seconds": self.seconds, "evaluations": self.evaluations,
            "predictions": self.predictions, "message": self.message,
            "stopped_by_budget": self.stopped_by_budget, "transferred": self.transferred,
            "excluded": [{"version": r.version, "hardware": r.hardware, "model": r.model, "scenario": r.scenario,
                          "accelerators": r.accelerators, "reason": why} for r, why in self.excluded],
            "cv": self.cv, "row_errors": self.row_errors, "op_errors": self.op_errors,
        }

    def to_table(self) -> str:
        from .cv import format_cv

        f = lambda x: "-" if x is None else f"{x:.1f}"  # noqa: E731
        lines = [f"data: {self.data}   frontier rows fitted: {self.rows}   parameters: {len(self.parameters)}   "
                 f"time: {self.seconds:.1f} s ({self.evaluations} evaluations, {self.predictions} predictions)",
                 f"fit median APE {f(self.before['median_ape'])} % -> {f(self.after['median_ape'])} %, "
                 f"p90 {f(self.before['p90_ape'])} % -> {f(self.after['p90_ape'])} %   ({self.message})"]
        if self.after.get("op_rows"):
            lines.append(f"operating points ({self.after['op_rows']}): TPOT at the steady occupancy, median APE "
                         f"{f(self.before.get('op_median_ape'))} % -> {f(self.after.get('op_median_ape'))} %, p90 "
                         f"{f(self.before.get('op_p90_ape'))} % -> {f(self.after.get('op_p90_ape'))} %")
        lines.append("")
        lines.append(f"{'parameter':<40}{'default':>10}{'initial':>10}{'fitted':>10}")
        for owner, vals in {**self.hardware, **self.presets}.items():
            for name, v in vals.items():
                label = f"{owner}.{name}"
                lines.append(f"{label:<40}{self.defaults.get(label, float('nan')):>10.4g}"
                             f"{self.initial.get(label, float('nan')):>10.4g}{v:>10.4g}")
        if self.reference_round:
            lines.append(f"(round {self.reference_round} maturity fixed as the reference; rounds constrained "
                         "so that a newer round is never slower)")
        for owner, why in self.skipped.items():
            lines.append(f"{owner}: unchanged ({why})")
        if self.findings:
            lines += ["", f"findings ({len(self.findings)} values on a bound or out of order):"]
            lines += [f"  - {x['text']}" for x in self.findings]
        else:
            lines += ["", "findings: none (every fitted value inside its range, rounds in order)"]
        if self.notes:
            lines += ["notes:"] + [f"  - {n}" for n in self.notes]
        if self.cv:
            lines += ["", format_cv(self.cv)]
        return "\n".join(lines)


__all__ = ["CalibrationResult"]
