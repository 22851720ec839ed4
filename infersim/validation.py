"""Validation: predict published MLPerf rows and report the error honestly.

Reads a CSV of published results (columns of ``data/mlperf_llm_results.csv``), predicts every row
with :func:`infersim.api.predict` (scenario ``mlperf-MODEL-SCENARIO``, round preset from the
row's ``version``), and summarises the absolute percentage error over all rows and over the
*frontier* (the best published result per version, hardware, model, scenario and accelerator
count). A row that cannot be predicted keeps its reason; no row is dropped. Sits at the report
end of the data flow: it calls the orchestrator and renders tables, JSON, CSV and a plot.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from .errors import InfeasibleError, SpecError

REQUIRED_COLUMNS: tuple[str, ...] = ("version", "hardware", "model", "scenario", "accelerators", "tokens_per_s")
"""Columns every validation CSV must have (others are carried through and otherwise ignored)."""

GROUP_FIELDS: tuple[str, ...] = ("version", "hardware", "model", "scenario", "accelerators")
"""A frontier group: the best published row per these fields is the frontier row."""

BREAKDOWNS: dict[str, str] = {"hardware": "hardware", "model": "model", "scenario": "scenario", "round": "version"}
"""Breakdown name → row field."""


def bundled_data() -> Path:
    """Path of the bundled MLPerf results CSV (``data/mlperf_llm_results.csv``)."""
    from .specs.catalog import bundled_root

    return bundled_root() / "data" / "mlperf_llm_results.csv"


# ---------------------------------------------------------------------------------------------
# Reading rows


@dataclass(frozen=True)
class Row:
    """One published result: the required fields typed, all CSV columns kept as text."""

    version: str
    hardware: str
    model: str
    scenario: str
    accelerators: int
    tokens_per_s: float
    """Published output tokens/s of the whole system."""
    columns: Mapping[str, str] = field(default_factory=dict, compare=False)
    """Every CSV column of the row, as text (header order)."""
    line: int = 0
    """Line number in the file (header = 1)."""
    file: str = "<memory>"
    """File the row was read from."""

    @property
    def scenario_id(self) -> str:
        """Scenario profile ID: ``mlperf-MODEL-SCENARIO``."""
        return f"mlperf-{self.model}-{self.scenario}"

    @property
    def group(self) -> tuple:
        """Frontier group key (version, hardware, model, scenario, accelerators)."""
        return (self.version, self.hardware, self.model, self.scenario, self.accelerators)


def make_row(version: str, hardware: str, model: str, scenario: str, accelerators: int, tokens_per_s: float,
             **extra: Any) -> Row:
    """Build a Row in code (tests, synthetic data); ``extra`` becomes extra columns."""
    cols = {"version": version, "hardware": hardware, "model": model, "scenario": scenario,
            "accelerators": str(accelerators), "tokens_per_s": repr(float(tokens_per_s))}
    cols.update({k: str(v) for k, v in extra.items()})
    return Row(version, hardware, model, scenario, int(accelerators), float(tokens_per_s), cols)


def _parse_number(text: str | None, *, file: str, row: int, line: int, column: str, integer: bool) -> float:
    where = f"row {row} (line {line}), column '{column}'"
    if text is None or not text.strip():
        raise SpecError("missing value; expected a positive number", file=file, path=where)
    try:
        value = float(text)
    except ValueError:
        raise SpecError(f"expected a number, got {text.strip()[:40]!r}", file=file, path=where) from None
    if not math.isfinite(value) or value <= 0:
        raise SpecError(f"expected a positive finite number, got {text.strip()[:40]!r}", file=file, path=where)
    if integer and value != int(value):
        raise SpecError(f"expected a whole number of accelerators, got {text.strip()[:40]!r}", file=file, path=where)
    return value


def load_rows(path: str | os.PathLike) -> list[Row]:
    """Read a validation CSV.

    Parameters
    ----------
    path : CSV file with at least the columns in ``REQUIRED_COLUMNS`` (extra columns are kept
        as text and otherwise ignored).

    Returns
    -------
    list of Row, in file order.

    Raises
    ------
    SpecError
        Unreadable file, missing column, or a non-numeric / non-positive ``accelerators`` or
        ``tokens_per_s``; the message names the file, the row number and the column.
    """
    file = str(path)
    try:
        text = Path(path).read_bytes().decode("utf-8-sig")
    except OSError as exc:
        raise SpecError(f"cannot read file ({exc.strerror})", file=file) from None
    except UnicodeDecodeError as exc:
        raise SpecError(f"not valid UTF-8 (byte {exc.start})", file=file) from None
    reader = csv.DictReader(io.StringIO(text, newline=""))
    header = [h.strip() for h in (reader.fieldnames or [])]
    if not header:
        raise SpecError("empty file; expected a CSV header with columns " + ", ".join(REQUIRED_COLUMNS), file=file)
    reader.fieldnames = header
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise SpecError(f"missing required column(s) {', '.join(missing)} (header has: {', '.join(header)})",
                        file=file, path="header")
    rows: list[Row] = []
    for i, rec in enumerate(reader, start=1):
        line = reader.line_num
        cols = {k: (v if isinstance(v, str) else "") for k, v in rec.items() if k is not None}
        for c in ("version", "hardware", "model", "scenario"):
            if not cols.get(c, "").strip():
                raise SpecError("missing value", file=file, path=f"row {i} (line {line}), column '{c}'")
        acc = _parse_number(rec.get("accelerators"), file=file, row=i, line=line, column="accelerators", integer=True)
        tps = _parse_number(rec.get("tokens_per_s"), file=file, row=i, line=line, column="tokens_per_s", integer=False)
        rows.append(Row(cols["version"].strip(), cols["hardware"].strip(), cols["model"].strip(),
                        cols["scenario"].strip(), int(acc), tps, cols, line, file))
    return rows


def frontier_mask(rows: list[Row]) -> list[bool]:
    """True for each row that is its group's best published result (the first one on ties).

    A group is (version, hardware, model, scenario, accelerators); each group has exactly one
    frontier row.
    """
    best: dict[tuple, int] = {}
    for i, r in enumerate(rows):
        j = best.get(r.group)
        if j is None or r.tokens_per_s > rows[j].tokens_per_s:
            best[r.group] = i
    chosen = set(best.values())
    return [i in chosen for i in range(len(rows))]


# ---------------------------------------------------------------------------------------------
# Predicting rows


class PredictionKey(NamedTuple):
    """What a prediction depends on; rows sharing a key share one prediction."""

    preset: str
    """Round whose software preset is used (the row's version, or the nearest earlier preset)."""
    hardware: str
    model: str
    scenario: str
    """Scenario profile ID (``mlperf-MODEL-SCENARIO``)."""
    accelerators: int


Predictor = Callable[[PredictionKey], "float | tuple[float | None, str]"]
"""A prediction function: key → predicted tokens/s, or (tokens/s or None, reason)."""


def preset_rounds(presets_dir: str | os.PathLike | None = None) -> list[str]:
    """Rounds with a preset in ``presets_dir`` (default: the bundled presets), oldest first."""
    from .optimizations import presets

    if presets_dir is None:
        return presets.list_rounds()
    return sorted((p.stem for p in Path(presets_dir).glob("v*.yaml")), key=presets._version_key)


def resolve_preset(version: str, presets_dir: str | os.PathLike | None = None) -> str:
    """The preset round used for a data round: itself, else the nearest earlier, else the earliest.

    Raises SpecError for a version not of the form vX.Y or when there are no presets.
    """
    from .optimizations import presets

    key = presets._version_key(version)
    rounds = preset_rounds(presets_dir)
    if not rounds:
        raise SpecError("no round presets (vX.Y.yaml) found", file=str(presets_dir) if presets_dir else None)
    earlier = [r for r in rounds if presets._version_key(r) <= key]
    return earlier[-1] if earlier else rounds[0]


def _apply_override(inputs, inputs_override):
    if inputs_override is None:
        return inputs
    if isinstance(inputs_override, Mapping):
        hw = inputs_override.get(inputs.hardware_id)
        return inputs if hw is None else replace(inputs, hardware=hw)
    return inputs_override(inputs)


def predict_key(key: PredictionKey, *, inputs_override=None, presets_dir=None, **predict_kwargs):
    """Predict one key with :func:`infersim.api.predict`.

    Parameters
    ----------
    key : the prediction key (preset round already resolved).
    inputs_override : callable ``Inputs -> Inputs``, or a mapping hardware ID → HardwareSpec,
        applied to the resolved specs before predicting (calibration uses it).
    presets_dir : folder of round presets (default: the bundled presets).
    **predict_kwargs : passed to ``predict`` (``enable``, ``disable``, ``params``).

    Returns
    -------
    (tokens_per_s or None, reason, prediction or None)
    """
    from . import api

    try:
        inputs = api.load_inputs(key.hardware, key.model, key.scenario)
        inputs = _apply_override(inputs, inputs_override)
        pred = api.predict(key.hardware, key.model, key.scenario, key.accelerators, round=key.preset,
                           inputs=inputs, presets_dir=presets_dir, **predict_kwargs)
    except SpecError as exc:
        return None, f"bad input: {exc}", None
    except InfeasibleError as exc:
        return None, f"infeasible: {exc}", None
    except Exception as exc:  # a model failure on one row must not hide the others; it is reported
        return None, f"internal error: {type(exc).__name__}: {exc}", None
    if not pred.feasible:
        return None, f"infeasible: {pred.reason}", pred
    value = float(pred.metrics.get("tokens_per_s", 0.0))
    if not math.isfinite(value) or value <= 0:
        return None, f"internal error: non-positive prediction {value!r}", pred
    return value, "", pred


_WORKER_STATE: dict[str, Any] = {}
"""Set before forking a worker pool; inherited by the workers (any callable override works)."""


def _worker_predict(key: PredictionKey) -> tuple[float | None, str]:
    value, reason, _ = predict_key(key, **_WORKER_STATE)
    return value, reason


def default_workers(n_tasks: int) -> int:
    """Processes to use for ``n_tasks`` predictions: 1 for small jobs or without ``fork``."""
    import multiprocessing

    if n_tasks <= 32 or "fork" not in multiprocessing.get_all_start_methods():
        return 1
    return max(1, min(4, os.cpu_count() or 1, n_tasks // 16))


def predict_keys(keys: list[PredictionKey], *, inputs_override=None, presets_dir=None, workers: int | None = None,
                 progress: Callable[[int, int], None] | None = None) -> dict[PredictionKey, tuple[float | None, str]]:
    """Predict distinct keys, in worker processes when ``workers`` > 1 (forked, so overrides
    need not pickle). Falls back to one process when a pool cannot be used.

    Returns
    -------
    dict key → (tokens_per_s or None, reason)
    """
    total = len(keys)
    workers = default_workers(total) if workers is None else max(1, int(workers))
    out: dict[PredictionKey, tuple[float | None, str]] = {}
    if workers > 1 and total > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        _WORKER_STATE.clear()
        _WORKER_STATE.update(inputs_override=inputs_override, presets_dir=presets_dir)
        try:
            ctx = multiprocessing.get_context("fork")
            with ProcessPoolExecutor(max_workers=min(workers, total), mp_context=ctx) as pool:
                futures = {pool.submit(_worker_predict, k): k for k in keys}
                for fut in as_completed(futures):
                    out[futures[fut]] = fut.result()
                    if progress is not None:
                        progress(len(out), total)
            return out
        except (OSError, ValueError, RuntimeError, ImportError):
            out.clear()  # no usable pool (sandbox, broken worker): predict in this process
        finally:
            _WORKER_STATE.clear()
    for n, key in enumerate(keys, start=1):
        value, reason, _ = predict_key(key, inputs_override=inputs_override, presets_dir=presets_dir)
        out[key] = (value, reason)
        if progress is not None:
            progress(n, total)
    return out


def _call_predictor(predictor: Predictor, key: PredictionKey) -> tuple[float | None, str]:
    try:
        out = predictor(key)
    except SpecError as exc:
        return None, f"bad input: {exc}"
    except InfeasibleError as exc:
        return None, f"infeasible: {exc}"
    if isinstance(out, tuple):
        value, reason = out[0], str(out[1])
    else:
        value, reason = out, ""
    if value is None:
        return None, reason or "no prediction"
    return float(value), reason


# ---------------------------------------------------------------------------------------------
# The report


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
    def ape(self) -> float | None:
        """Absolute percentage error, %."""
        e = self.error_pct
        return None if e is None else abs(e)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = dict(self.row.columns) if self.row.columns else {}
        d.update({"version": self.row.version, "hardware": self.row.hardware, "model": self.row.model,
                  "scenario": self.row.scenario, "accelerators": self.row.accelerators,
                  "tokens_per_s": self.row.tokens_per_s})
        d.update({"preset": self.preset, "predicted_tokens_per_s": self.predicted, "error_pct": self.error_pct,
                  "frontier": self.frontier, "reason": self.reason})
        return d


def _stats(apes: list[float]) -> tuple[float | None, float | None]:
    if not apes:
        return None, None
    a = np.asarray(apes, dtype=float)
    return float(np.median(a)), float(np.percentile(a, 90))


def summarize(results: list[RowResult]) -> dict[str, Any]:
    """Summary numbers: counts, median / p90 APE over all predicted rows and the frontier, breakdowns.

    ``rows`` counts every row; the error statistics are over rows that were predicted
    (``n_failed`` were not; each keeps its reason in the per-row list).
    """
    ok = [r for r in results if r.predicted is not None]
    front = [r for r in results if r.frontier]
    front_ok = [r for r in front if r.predicted is not None]
    med, p90 = _stats([r.ape for r in ok])
    fmed, fp90 = _stats([r.ape for r in front_ok])
    signed = [r.error_pct for r in ok]
    out: dict[str, Any] = {
        "rows": len(results),
        "predicted_rows": len(ok),
        "n_failed": len(results) - len(ok),
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
            table[value] = {"rows": len(g), "n_failed": len(g) - len(g_ok), "median_ape": _stats(g_ok)[0],
                            "frontier_rows": sum(r.frontier for r in g), "frontier_median_ape": _stats(g_front)[0]}
        out[f"by_{name}"] = table
    return out


def _sorted_values(name: str, groups: Mapping[str, Any]) -> list[str]:
    if name == "round":
        def key(v: str):
            try:
                return (0, tuple(int(x) for x in v.lstrip("v").split(".")), v)
            except ValueError:
                return (1, (), v)
        return sorted(groups, key=key)
    return sorted(groups)


def _fmt(x: float | None, spec: str = ".1f") -> str:
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
        return json.dumps(_json_safe(self.to_dict()), indent=indent)

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
            f"rows: {s['rows']} ({s['predicted_rows']} predicted, {s['n_failed']} not predicted); "
            f"{self.predictions} distinct predictions in {self.elapsed_s:.2f} s",
            "",
            f"{'set':<14}{'rows':>6}{'median APE %':>14}{'p90 APE %':>12}",
            f"{'all':<14}{s['predicted_rows']:>6}{_fmt(s['median_ape']):>14}{_fmt(s['p90_ape']):>12}",
            f"{'frontier':<14}{s['frontier_predicted_rows']:>6}{_fmt(s['frontier_median_ape']):>14}"
            f"{_fmt(s['frontier_p90_ape']):>12}",
        ]
        if breakdowns:
            for name in BREAKDOWNS:
                lines += ["", f"{'by ' + name:<22}{'rows':>6}{'failed':>8}{'median APE %':>14}"
                              f"{'frontier':>10}{'frontier med %':>16}"]
                for value, t in s[f"by_{name}"].items():
                    lines.append(f"{value:<22}{t['rows']:>6}{t['n_failed']:>8}{_fmt(t['median_ape']):>14}"
                                 f"{t['frontier_rows']:>10}{_fmt(t['frontier_median_ape']):>16}")
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
            lines += ["", f"not predicted ({len(failed)} rows):"]
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


def _json_safe(obj):
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    return obj


# ---------------------------------------------------------------------------------------------
# Running a validation


def validate(rows: Iterable[Row] | str | os.PathLike, *, progress: Callable[[int, int], None] | None = None,
             inputs_override=None, presets_dir: str | os.PathLike | None = None,
             predictor: Predictor | None = None, workers: int | None = None) -> ValidationReport:
    """Predict every row and compare with the published tokens/s.

    Parameters
    ----------
    rows : rows from :func:`load_rows` (or a CSV path).
    progress : called as ``progress(done, total)`` after each distinct prediction.
    inputs_override : callable ``Inputs -> Inputs`` or mapping hardware ID → HardwareSpec,
        applied to the resolved specs before each prediction (e.g. calibrated efficiencies).
    presets_dir : folder of round presets ``vX.Y.yaml`` (default: the bundled presets).
    predictor : replaces :func:`infersim.api.predict`: ``key -> tokens/s`` or
        ``key -> (tokens/s or None, reason)``; for tests and what-if studies.
    workers : processes for the distinct predictions (default: one per CPU, at most 4, when
        there are more than 32 distinct predictions and ``fork`` is available; else 1).

    Returns
    -------
    ValidationReport with one result per row, in input order.

    Notes
    -----
    Each row is predicted as ``predict(hardware, model, f"mlperf-{model}-{scenario}",
    accelerators, round=preset)`` where ``preset`` is the row's version or the nearest earlier
    round with a preset. Predictions are cached per (preset, hardware, model, scenario,
    accelerators), so rows sharing a system share one prediction. Signed error % =
    (predicted − published) / published · 100.
    """
    start = time.perf_counter()
    data = "<memory>"
    if isinstance(rows, (str, os.PathLike)):
        data = str(rows)
        rows = load_rows(rows)
    rows = list(rows)
    if rows and rows[0].file != "<memory>":
        data = rows[0].file
    front = frontier_mask(rows)

    keys: list[PredictionKey | None] = []
    key_reason: dict[int, str] = {}
    for i, r in enumerate(rows):
        try:
            preset = resolve_preset(r.version, presets_dir)
        except SpecError as exc:
            keys.append(None)
            key_reason[i] = f"bad input: version '{r.version}': {exc.detail}"
            continue
        keys.append(PredictionKey(preset, r.hardware, r.model, r.scenario_id, r.accelerators))

    distinct = list(dict.fromkeys(k for k in keys if k is not None))
    if predictor is not None:
        cache = {}
        for n, key in enumerate(distinct, start=1):
            cache[key] = _call_predictor(predictor, key)
            if progress is not None:
                progress(n, len(distinct))
    else:
        cache = predict_keys(distinct, inputs_override=inputs_override, presets_dir=presets_dir,
                             workers=workers, progress=progress)

    results = []
    for i, (r, key) in enumerate(zip(rows, keys)):
        if key is None:
            results.append(RowResult(r, None, None, key_reason[i], front[i]))
        else:
            value, reason = cache[key]
            results.append(RowResult(r, key.preset, value, reason, front[i]))
    return ValidationReport(results, data=data, elapsed_s=time.perf_counter() - start, predictions=len(distinct))


# ---------------------------------------------------------------------------------------------
# Files and plots


def write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to ``path`` atomically (temporary file in the same folder, then rename)."""
    return _atomic_write(Path(path), text.encode("utf-8"))


def _atomic_write(path: Path, payload: bytes) -> Path:
    from .report import write_atomic

    return write_atomic(path, payload)


def plot(report: ValidationReport, path: str | os.PathLike, *, color_by: str = "model",
         title: str | None = None) -> Path:
    """Predicted vs published tokens/s, log-log, one colour per model (or hardware).

    Draws the y = x line with ±10 % and ±25 % bands; frontier rows are large outlined markers,
    other rows small and translucent. Rows without a prediction are counted in the title. The
    file type follows the suffix (``.png``, ``.svg``, ``.pdf``); written atomically.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if color_by not in ("model", "hardware", "scenario", "version"):
        raise SpecError(f"color_by must be model, hardware, scenario or version (got '{color_by}')")
    path = Path(path)
    fmt = (path.suffix.lstrip(".") or "png").lower()
    ok = [r for r in report.results if r.predicted is not None]
    fig = Figure(figsize=(7.5, 6.5), dpi=120)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    values = [v for r in ok for v in (r.row.tokens_per_s, r.predicted)]
    lo, hi = (min(values) / 2, max(values) * 2) if values else (1.0, 1e6)
    xs = np.geomspace(lo, hi, 64)
    ax.fill_between(xs, xs / 1.25, xs * 1.25, color="0.9", lw=0, label="±25 %")
    ax.fill_between(xs, xs / 1.10, xs * 1.10, color="0.78", lw=0, label="±10 %")
    ax.plot(xs, xs, color="0.3", lw=1, label="y = x")
    groups = sorted({getattr(r.row, color_by) for r in ok})
    cmap = fig.colormaps["tab10"] if hasattr(fig, "colormaps") else None
    if cmap is None:
        import matplotlib

        cmap = matplotlib.colormaps["tab10"]
    for gi, g in enumerate(groups):
        color = cmap(gi % 10)
        back = [r for r in ok if getattr(r.row, color_by) == g and not r.frontier]
        top = [r for r in ok if getattr(r.row, color_by) == g and r.frontier]
        if back:
            ax.scatter([r.row.tokens_per_s for r in back], [r.predicted for r in back], s=12, color=color, alpha=0.35,
                       lw=0)
        ax.scatter([r.row.tokens_per_s for r in top], [r.predicted for r in top], s=36, color=color,
                   edgecolors="black", linewidths=0.6, label=str(g))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("published output tokens/s (system)")
    ax.set_ylabel("predicted output tokens/s (system)")
    s = report.summary
    head = title or "infersim vs MLPerf Inference"
    ax.set_title(f"{head}\nfrontier median APE {_fmt(s['frontier_median_ape'])} %, p90 {_fmt(s['frontier_p90_ape'])} %"
                 f"; all {_fmt(s['median_ape'])} % / {_fmt(s['p90_ape'])} %"
                 + (f"; {s['n_failed']} rows not predicted" if s["n_failed"] else ""), fontsize=9)
    ax.grid(True, which="both", lw=0.3, alpha=0.5)
    ax.legend(loc="upper left", fontsize=8, title=f"{color_by} (outlined: frontier)", title_fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt)
    return _atomic_write(path, buf.getvalue())


__all__ = ["REQUIRED_COLUMNS", "Row", "RowResult", "ValidationReport", "PredictionKey", "bundled_data", "load_rows",
           "make_row", "frontier_mask", "resolve_preset", "predict_key", "summarize", "validate", "plot", "write_text"]
