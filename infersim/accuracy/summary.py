"""Summaries of a validation: per-row errors, median / p90 over all rows and the frontier,
breakdowns by hardware, model, scenario and round, rendered as a table, JSON or CSV."""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from ..errors import SpecError
from .data import NOT_MODELLED, REQUIRED_COLUMNS, Row
from .oppoints import AT_LIMIT_SHARE, LOAD_CLASSES, load_class

BREAKDOWNS: dict[str, str] = {"hardware": "hardware", "model": "model", "scenario": "scenario", "round": "version"}
"""Breakdown name → row field."""


@dataclass(frozen=True)
class RowResult:
    """One row with its prediction (``predicted`` None when it could not be predicted)."""

    row: Row
    preset: str | None
    """Round preset used (None when the version could not be resolved)."""
    predicted: float | None
    """Predicted output tokens/s of the whole system; None with a ``reason``."""
    reason: str
    frontier: bool
    """True when this row is its group's best published result."""

    @property
    def error_pct(self) -> float | None:
        """Signed error, %: (predicted − published) / published · 100."""
        if self.predicted is None:
            return None
        return (self.predicted - self.row.tokens_per_s) / self.row.tokens_per_s * 100.0

    @property
    def not_modelled(self) -> bool:
        """True for a row the model does not describe (e.g. a run at another power configuration)."""
        return self.predicted is None and self.reason.startswith(NOT_MODELLED)

    @property
    def ape(self) -> float | None:
        """Absolute percentage error, %."""
        e = self.error_pct
        return None if e is None else abs(e)

    @cached_property
    def load(self) -> tuple[str, float | None]:
        """(``oppoints.LOAD_CLASSES`` entry, latency limit share) of the row's run (``oppoints.load_class``)."""
        c = self.row.columns or {}
        return load_class(self.row.version, c.get("submitter", ""), c.get("system", ""), self.row.model,
                          self.row.scenario)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = dict(self.row.columns) if self.row.columns else {}
        d.update({"version": self.row.version, "hardware": self.row.hardware, "model": self.row.model,
                  "scenario": self.row.scenario, "accelerators": self.row.accelerators,
                  "tokens_per_s": self.row.tokens_per_s})
        d.update({"preset": self.preset, "predicted_tokens_per_s": self.predicted, "error_pct": self.error_pct,
                  "frontier": self.frontier, "reason": self.reason, "load": self.load[0],
                  "latency_limit_share": self.load[1]})
        return d


def stats(apes: list[float]) -> tuple[float | None, float | None]:
    if not apes:
        return None, None
    a = np.asarray(apes, dtype=float)
    return float(np.median(a)), float(np.percentile(a, 90))


def summarize(results: list[RowResult]) -> dict[str, Any]:
    """Summary numbers: counts, median / p90 APE over all predicted rows and the frontier, breakdowns.

    ``rows`` counts every row; the error statistics are over rows that were predicted
    (``n_failed`` were not, ``not_modelled_rows`` describe a configuration the model does not, such as
    a run at another power configuration; each keeps its reason in the per-row list).
    """
    ok = [r for r in results if r.predicted is not None]
    skipped = sum(r.not_modelled for r in results)
    front = [r for r in results if r.frontier]
    front_ok = [r for r in front if r.predicted is not None]
    med, p90 = stats([r.ape for r in ok])
    fmed, fp90 = stats([r.ape for r in front_ok])
    signed = [r.error_pct for r in ok]
    out: dict[str, Any] = {
        "rows": len(results),
        "predicted_rows": len(ok),
        "n_failed": len(results) - len(ok) - skipped,
        "not_modelled_rows": skipped,
        "median_ape": med,
        "p90_ape": p90,
        "median_signed_error_pct": float(np.median(signed)) if signed else None,
        "frontier_rows": len(front),
        "frontier_predicted_rows": len(front_ok),
        "frontier_n_failed": len(front) - len(front_ok),
        "frontier_median_ape": fmed,
        "frontier_p90_ape": fp90,
    }
    for name, attr in BREAKDOWNS.items():
        groups: dict[str, list[RowResult]] = {}
        for r in results:
            groups.setdefault(getattr(r.row, attr), []).append(r)
        table = {}
        for value in _sorted_values(name, groups):
            g = groups[value]
            g_ok = [r.ape for r in g if r.predicted is not None]
            g_front = [r.ape for r in g if r.frontier and r.predicted is not None]
            g_skip = sum(r.not_modelled for r in g)
            table[value] = {"rows": len(g), "n_failed": len(g) - len(g_ok) - g_skip, "median_ape": stats(g_ok)[0],
                            "frontier_rows": sum(r.frontier for r in g), "frontier_median_ape": stats(g_front)[0]}
        out[f"by_{name}"] = table
    out["by_load"] = load_split([(r.load[0], r.row.tokens_per_s, r.predicted) for r in front])
    return out


def load_split(items: list[tuple[str, float, float | None]]) -> dict[str, dict[str, Any]]:
    """Frontier error split by how hard the published run was driven (``oppoints.load_class``):
    ``items`` are (class, published, predicted). A run that ended below its latency limits published
    a rate below its capacity, so a capacity prediction above it is expected there; the share of
    such rows predicted at or above the published rate is reported with the errors."""
    out: dict[str, dict[str, Any]] = {}
    for cls in LOAD_CLASSES:
        got = [(p, v) for c, p, v in items if c == cls and v is not None]
        signed = [100 * (v / p - 1) for p, v in got]
        med, p90 = stats([abs(e) for e in signed])
        out[cls] = {"rows": sum(c == cls for c, _, _ in items), "median_ape": med, "p90_ape": p90,
                    "median_signed_error_pct": float(np.median(signed)) if signed else None,
                    "share_predicted_at_or_above": (sum(e >= 0 for e in signed) / len(signed)) if signed else None}
    return out


LOAD_LABELS = {"at_limit": "at its limit", "below_limit": "below limits", "no_record": "no record"}
"""Table labels of ``oppoints.LOAD_CLASSES``."""


def load_split_lines(split: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Table lines of ``load_split``."""
    lines = [f"frontier rows by how hard the published run was driven: at its limit (a latency p99 >= {AT_LIMIT_SHARE:g}"
             " of its limit),",
             "below its limits (the published rate is a lower bound on capacity), no record (Offline, before v5.1)",
             f"{'load':<14}{'rows':>6}{'median APE %':>14}{'p90 APE %':>12}{'median signed %':>17}{'pred >= pub':>13}"]
    for cls, t in split.items():
        share = t["share_predicted_at_or_above"]
        lines.append(f"{LOAD_LABELS.get(cls, cls):<14}{t['rows']:>6}{fmt(t['median_ape']):>14}{fmt(t['p90_ape']):>12}"
                     f"{fmt(t['median_signed_error_pct'], '+.1f'):>17}{'-' if share is None else f'{100 * share:.0f} %':>13}")
    return lines


def _sorted_values(name: str, groups: Mapping[str, Any]) -> list[str]:
    if name == "round":
        def key(v: str):
            try:
                return (0, tuple(int(x) for x in v.lstrip("v").split(".")), v)
            except ValueError:
                return (1, (), v)
        return sorted(groups, key=key)
    return sorted(groups)


def fmt(x: float | None, spec: str = ".1f") -> str:
    return "-" if x is None else format(x, spec)


@dataclass
class ValidationReport:
    """Per-row results of a validation run and their summary.

    ``results`` keeps every input row in input order; ``summary`` holds the headline numbers
    (percentages) and breakdowns by hardware, model, scenario and round.
    """

    results: list[RowResult]
    data: str = "<memory>"
    """The data file (or a label)."""
    elapsed_s: float = 0.0
    """Wall time of the validation, seconds."""
    predictions: int = 0
    """Distinct predictions made (rows sharing a key share one)."""

    @cached_property
    def summary(self) -> dict[str, Any]:
        return summarize(self.results)

    def failed(self) -> list[RowResult]:
        """Rows not predicted, not-modelled ones included (each with its reason)."""
        return [r for r in self.results if r.predicted is None]

    def worst(self, n: int = 10, *, frontier_only: bool = False) -> list[RowResult]:
        """The ``n`` predicted rows with the largest absolute error."""
        pool = [r for r in self.results if r.predicted is not None and (r.frontier or not frontier_only)]
        return sorted(pool, key=lambda r: -r.ape)[:n]

    def to_dict(self) -> dict[str, Any]:
        """Summary keys at the top level (percentages), then ``results``: one dict per input row."""
        # The public contract makes `rows` the row count, so the per-row list is `results`.
        out = {**self.summary, "data": self.data, "elapsed_s": self.elapsed_s, "predictions": self.predictions}
        out["results"] = [r.to_dict() for r in self.results]
        return out

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(json_safe(self.to_dict()), indent=indent)

    def csv_columns(self) -> list[str]:
        cols: list[str] = []
        for r in self.results:
            for c in r.row.columns or REQUIRED_COLUMNS:
                if c not in cols:
                    cols.append(c)
        for c in REQUIRED_COLUMNS:
            if c not in cols:
                cols.append(c)
        return cols + ["preset", "predicted_tokens_per_s", "error_pct", "frontier", "reason"]

    def to_csv(self) -> str:
        """Per-row results as CSV: every input column, then preset, prediction, error, frontier, reason."""
        buf = io.StringIO()
        cols = self.csv_columns()
        w = csv.DictWriter(buf, fieldnames=cols, lineterminator="\n", extrasaction="ignore")
        w.writeheader()
        for r in self.results:
            d = r.to_dict()
            d["predicted_tokens_per_s"] = "" if r.predicted is None else f"{r.predicted:.6g}"
            d["error_pct"] = "" if r.error_pct is None else f"{r.error_pct:.2f}"
            d["frontier"] = "true" if r.frontier else "false"
            d["preset"] = r.preset or ""
            w.writerow({c: d.get(c, "") for c in cols})
        return buf.getvalue()

    def to_table(self, *, worst: int = 10, breakdowns: bool = True) -> str:
        """A plain-text accuracy table: headline, breakdowns, worst rows and failures."""
        s = self.summary
        lines = [
            f"data: {self.data}",
            f"rows: {s['rows']} ({s['predicted_rows']} predicted, {s['n_failed']} not predicted"
            + (f", {s['not_modelled_rows']} not modelled" if s.get("not_modelled_rows") else "") + "); "
            f"{self.predictions} distinct predictions in {self.elapsed_s:.2f} s",
            "",
            f"{'set':<14}{'rows':>6}{'median APE %':>14}{'p90 APE %':>12}",
            f"{'all':<14}{s['predicted_rows']:>6}{fmt(s['median_ape']):>14}{fmt(s['p90_ape']):>12}",
            f"{'frontier':<14}{s['frontier_predicted_rows']:>6}{fmt(s['frontier_median_ape']):>14}"
            f"{fmt(s['frontier_p90_ape']):>12}",
        ]
        lines += [""] + load_split_lines(s["by_load"])
        if breakdowns:
            for name in BREAKDOWNS:
                lines += ["", f"{'by ' + name:<22}{'rows':>6}{'failed':>8}{'median APE %':>14}"
                              f"{'frontier':>10}{'frontier med %':>16}"]
                for value, t in s[f"by_{name}"].items():
                    lines.append(f"{value:<22}{t['rows']:>6}{t['n_failed']:>8}{fmt(t['median_ape']):>14}"
                                 f"{t['frontier_rows']:>10}{fmt(t['frontier_median_ape']):>16}")
        if worst:
            lines += ["", f"worst {worst} rows (absolute error):",
                      f"{'version':<8}{'hardware':<14}{'model':<15}{'scenario':<12}{'acc':>5}"
                      f"{'published':>12}{'predicted':>12}{'error %':>9} frontier"]
            for r in self.worst(worst):
                lines.append(f"{r.row.version:<8}{r.row.hardware:<14}{r.row.model:<15}{r.row.scenario:<12}"
                             f"{r.row.accelerators:>5}{r.row.tokens_per_s:>12.1f}{r.predicted:>12.1f}"
                             f"{r.error_pct:>+9.1f} {'yes' if r.frontier else ''}")
        failed = self.failed()
        if failed:
            what = "not predicted or not modelled" if any(r.not_modelled for r in failed) else "not predicted"
            lines += ["", f"{what} ({len(failed)} rows):"]
            for r in failed:
                lines.append(f"  line {r.row.line}: {r.row.version} {r.row.hardware} {r.row.model} "
                             f"{r.row.scenario} x{r.row.accelerators}: {r.reason}")
        return "\n".join(lines)

    def render(self, format: str = "table") -> str:
        """Text in ``format``: ``table``, ``json`` or ``csv``."""
        if format == "table":
            return self.to_table()
        if format == "json":
            return self.to_json()
        if format == "csv":
            return self.to_csv()
        raise SpecError(f"unknown format '{format}' (expected table, json or csv)")


def json_safe(obj):
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


__all__ = ["RowResult", "ValidationReport", "summarize", "stats", "fmt", "json_safe", "BREAKDOWNS", "load_split",
           "load_split_lines"]
