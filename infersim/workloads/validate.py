"""Validation against published results that carry samples/s or a latency (not tokens/s).

A CSV row names its metric: ``metric`` is ``samples_per_s`` (Offline/Server throughput of the
whole system) or ``latency_s`` (SingleStream percentile latency), ``value`` the published figure.
Rows need ``version, hardware, model, scenario, accelerators, metric, value``; an optional
``scenario_profile`` names the scenario profile (default ``mlperf-MODEL-SCENARIO``). Non-LLM
models are predicted by ``infersim.workloads``; LLM rows (Qwen3-VL) by ``infersim.api.predict``
with the row's round preset, whose requests/s is the samples/s. A text-to-video row that declares
a 16- or 8-bit ``precision`` is predicted at it (``declared_precision``). The summary reports the
median and p90 absolute percentage error per benchmark (model) and per benchmark × scenario.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import SpecError
from ..specs import catalog
from ..specs.workload_models import DiffusionVideoModelSpec
from .predict import is_workload_model, predict

REQUIRED: tuple[str, ...] = ("version", "hardware", "model", "scenario", "accelerators", "metric", "value")
METRICS: tuple[str, ...] = ("samples_per_s", "latency_s")


def is_metric_csv(path: str | os.PathLike) -> bool:
    """True when the CSV header has the ``metric`` and ``value`` columns (and no tokens_per_s).

    Only a regular file is opened (a FIFO or device would block); anything else is left to the
    loader, which refuses it with a clear message."""
    if not Path(path).is_file():
        return False
    try:
        with open(path, encoding="utf-8-sig", newline="") as f:
            header = next(csv.reader(f), [])
    except (OSError, UnicodeDecodeError):
        return False
    header = [h.strip() for h in header]
    return "metric" in header and "value" in header and "tokens_per_s" not in header


@dataclass
class MetricRow:
    version: str
    hardware: str
    model: str
    scenario: str
    accelerators: int
    metric: str
    value: float
    scenario_profile: str
    columns: dict[str, str] = field(default_factory=dict)
    predicted: float | None = None
    reason: str = ""

    @property
    def error_pct(self) -> float | None:
        if self.predicted is None:
            return None
        return 100.0 * (self.predicted - self.value) / self.value

    def to_dict(self) -> dict[str, Any]:
        e = self.error_pct
        return {"version": self.version, "hardware": self.hardware, "model": self.model, "scenario": self.scenario,
                "accelerators": self.accelerators, "submitter": self.columns.get("submitter", ""),
                "metric": self.metric, "published": self.value, "predicted": self.predicted,
                "error_pct": e, "ape": None if e is None else abs(e), "reason": self.reason}


def load_metric_rows(path: str | os.PathLike) -> list[MetricRow]:
    """Read a metric-per-row CSV; errors name the file, row and column."""
    file = str(path)
    try:
        text = Path(path).read_bytes().decode("utf-8-sig")
    except OSError as exc:
        raise SpecError(f"cannot read file ({exc.strerror})", file=file) from None
    except UnicodeDecodeError as exc:
        raise SpecError(f"not valid UTF-8 (byte {exc.start})", file=file) from None
    reader = csv.DictReader(io.StringIO(text, newline=""))
    header = [h.strip() for h in (reader.fieldnames or [])]
    reader.fieldnames = header
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise SpecError(f"missing required column(s) {', '.join(missing)}", file=file, path="header")
    rows = []
    for i, rec in enumerate(reader, start=1):
        where = f"row {i} (line {reader.line_num})"
        cols = {k: (v or "").strip() for k, v in rec.items() if k is not None}
        for c in ("version", "hardware", "model", "scenario"):
            if not cols.get(c):
                raise SpecError("missing value", file=file, path=f"{where}, column '{c}'")
        if cols["metric"] not in METRICS:
            raise SpecError(f"metric must be one of {', '.join(METRICS)} (got {cols['metric']!r})", file=file,
                            path=f"{where}, column 'metric'")
        nums = {}
        for c in ("accelerators", "value"):
            try:
                nums[c] = float(cols[c])
            except ValueError:
                raise SpecError(f"expected a positive number, got {cols[c][:40]!r}", file=file, path=f"{where}, column '{c}'") from None
            if not math.isfinite(nums[c]) or nums[c] <= 0:
                raise SpecError(f"expected a positive number, got {cols[c][:40]!r}", file=file, path=f"{where}, column '{c}'")
        if nums["accelerators"] != int(nums["accelerators"]):
            raise SpecError("expected a whole number of accelerators", file=file, path=f"{where}, column 'accelerators'")
        profile = cols.get("scenario_profile") or f"mlperf-{cols['model']}-{cols['scenario']}"
        rows.append(MetricRow(cols["version"], cols["hardware"], cols["model"], cols["scenario"],
                              int(nums["accelerators"]), cols["metric"], nums["value"], profile, cols))
    return rows


DECLARED_PRECISIONS = {"bfloat16": "bf16", "bf16": "bf16", "float16": "fp16", "fp16": "fp16", "fp8": "fp8"}
"""A row's declared ``precision`` that names a 16- or 8-bit compute format. Wider declarations
(the NVIDIA-recipe WAN-2.2 rows declare "fp32", the checkpoint's storage type, while their configs
run Transformer Engine FP8 attention and linears, shared/reference/mlperf_non_llm.md) and
unknown ones leave the scenario's precision."""


def declared_precision(row: MetricRow) -> str | None:
    """The compute precision a text-to-video row declares, or None (the scenario's applies)."""
    return DECLARED_PRECISIONS.get(row.columns.get("precision", "").strip().lower())


def predict_row(row: MetricRow) -> None:
    """Fill ``row.predicted`` (or ``row.reason`` when it cannot be predicted)."""
    try:
        if is_workload_model(row.model):
            md = catalog.load("model", row.model)
            prec = declared_precision(row) if isinstance(md, DiffusionVideoModelSpec) else None
            p = predict(row.hardware, row.model, row.scenario_profile, row.accelerators, precision=prec)
            if not p.feasible:
                row.reason = p.reason
                return
            row.predicted = p.metrics["samples_per_s"] if row.metric == "samples_per_s" else p.metrics["latency_s"]
            return
        from .. import api
        from ..accuracy.data import resolve_preset

        if row.metric != "samples_per_s":
            row.reason = "LLM rows are validated on samples_per_s only"
            return
        pred = api.predict(row.hardware, row.model, row.scenario_profile, row.accelerators, round=resolve_preset(row.version))
        if not pred.feasible:
            row.reason = pred.reason
            return
        row.predicted = pred.metrics["requests_per_s"]
    except SpecError as exc:
        row.reason = str(exc)


def _stats(apes: list[float]) -> dict[str, Any]:
    if not apes:
        return {"rows": 0, "median_ape": None, "p90_ape": None}
    a = np.asarray(apes)
    return {"rows": len(apes), "median_ape": float(np.median(a)), "p90_ape": float(np.percentile(a, 90))}


def summarize(rows: list[MetricRow]) -> dict[str, Any]:
    """Overall, per benchmark (model) and per benchmark × scenario error statistics."""
    ok = [r for r in rows if r.predicted is not None]
    by_model: dict[str, list[float]] = {}
    by_pair: dict[str, list[float]] = {}
    for r in ok:
        by_model.setdefault(r.model, []).append(abs(r.error_pct))
        by_pair.setdefault(f"{r.model} {r.scenario}", []).append(abs(r.error_pct))
    out = {**_stats([abs(r.error_pct) for r in ok]), "failed_rows": len(rows) - len(ok)}
    out["by_benchmark"] = {k: _stats(v) for k, v in sorted(by_model.items())}
    out["by_benchmark_scenario"] = {k: _stats(v) for k, v in sorted(by_pair.items())}
    return out


def validate_metric_csv(path: str | os.PathLike) -> tuple[list[MetricRow], dict[str, Any]]:
    rows = load_metric_rows(path)
    for r in rows:
        predict_row(r)
    return rows, summarize(rows)


def render(rows: list[MetricRow], summary: dict[str, Any], fmt: str = "table") -> str:
    """The report as text: table, json or csv."""
    if fmt == "json":
        return json.dumps({**summary, "per_row": [r.to_dict() for r in rows]}, indent=2)
    if fmt == "csv":
        buf = io.StringIO()
        dicts = [r.to_dict() for r in rows]
        w = csv.DictWriter(buf, fieldnames=list(dicts[0]) if dicts else ["metric"])
        w.writeheader()
        w.writerows(dicts)
        return buf.getvalue()
    f = lambda x, s=".1f": "—" if x is None else format(x, s)  # noqa: E731
    lines = [f"{'benchmark / scenario':44s} {'rows':>4s} {'median APE %':>12s} {'p90 APE %':>10s}"]
    for name, st in list(summary["by_benchmark"].items()) + [("", None)] + list(summary["by_benchmark_scenario"].items()):
        if st is None:
            lines.append("")
            continue
        lines.append(f"{name:44s} {st['rows']:4d} {f(st['median_ape']):>12s} {f(st['p90_ape']):>10s}")
    lines.append(f"{'all rows':44s} {summary['rows']:4d} {f(summary['median_ape']):>12s} {f(summary['p90_ape']):>10s}"
                 f"   ({summary['failed_rows']} not predicted)")
    lines.append("")
    lines.append(f"{'model':20s} {'scenario':13s} {'hardware':12s} {'n':>3s} {'submitter':20s} {'metric':14s} "
                 f"{'published':>11s} {'predicted':>11s} {'error %':>8s}")
    for r in rows:
        d = r.to_dict()
        lines.append(f"{r.model:20s} {r.scenario:13s} {r.hardware:12s} {r.accelerators:3d} {d['submitter'][:20]:20s} "
                     f"{r.metric:14s} {r.value:11.4g} {f(r.predicted, '.4g'):>11s} {f(d['error_pct'], '+.1f'):>8s}"
                     + (f"  {r.reason}" if r.reason else ""))
    return "\n".join(lines)
