"""Operating points as fit data: the iteration time a run measured at the load it ran.

A Server/Interactive throughput row fixes one point of the engine's load curve, at a load the
submitter chose. The operating-point data (``data/mlperf_operating_points.csv``, from LoadGen's
detailed logs; source: shared/reference/mlperf_operating_points.csv) also give, per run, the
mean number of queries in flight (LoadGen's ``mean_inflight_queries``, Little's law) and the mean
time per output token. The model's mean TPOT at that *measured* occupancy is the step cost of
that batch plus its prefill stalls, independent of how load maps to occupancy; a residual
``log(model / measured)`` per run pins the step-cost curve at the operating point (the throughput
rows pin it at capacity).

The CSV reader (columns, hardware and model mapping) lives here and ``infersim.at_load`` uses it.

Rows used: Server and Interactive runs with a hardware profile, a measured mean occupancy and a
measured mean TPOT; duplicate runs (the -99 and -99.9 accuracy variants of one run) count once.
"""

from __future__ import annotations

import csv
import io
import math
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import SpecError
from .data import PredictionKey, preset_rounds, resolve_preset

REQUIRED = ("version", "submitter", "system", "benchmark", "scenario", "total_accelerators", "scheduled_samples_per_s",
            "tokens_per_sample", "tpot_p50_ms", "ttft_p50_ms", "ttft_p99_ms", "tpot_p99_ms")

HARDWARE_RULES = (  # (pattern in the accelerator or system name, hardware profile ID); first match wins
    (r"GB300", "gb300-nvl72"), (r"GB200", "gb200-nvl72"), (r"B300", "b300"), (r"B200", "b200"),
    (r"H200[-_ ]?SXM", "h200-sxm"), (r"H100[-_ ]?SXM", "h100-sxm"), (r"H100[-_ ]?PCIe", "h100-pcie"),
    (r"MI355X", "mi355x"), (r"MI325X", "mi325x"), (r"MI300X", "mi300x"), (r"L40S", "l40s"),
)


def bundled_data() -> Path:
    """``data/mlperf_operating_points.csv`` (source: shared/reference/mlperf_operating_points.csv)."""
    from ..specs.catalog import bundled_root

    return bundled_root() / "data" / "mlperf_operating_points.csv"


def hardware_id(cols: dict[str, str]) -> str | None:
    """Hardware profile ID of a row: its ``hardware`` column, else ``HARDWARE_RULES`` on the
    accelerator name (a single kind only) and then the system name."""
    if cols.get("hardware", "").strip():
        return cols["hardware"].strip()
    acc = cols.get("accelerator", "")
    if "," in acc:  # mixed accelerators in one system
        return None
    for text in (acc, cols.get("system", "")):
        for pat, hw in HARDWARE_RULES:
            if re.search(pat, text, re.I):
                return hw
    return None


def model_id(benchmark: str) -> str:
    return re.sub(r"-99(\.9)?$", "", benchmark.strip())


def load(path) -> list[dict[str, str]]:
    """Rows of the CSV as dicts; SpecError names the file and the missing column."""
    file = str(path)
    try:
        text = Path(path).read_bytes().decode("utf-8-sig")
    except OSError as exc:
        raise SpecError(f"cannot read file ({exc.strerror})", file=file) from None
    reader = csv.DictReader(io.StringIO(text, newline=""))
    header = [h.strip() for h in (reader.fieldnames or [])]
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise SpecError(f"missing required column(s) {', '.join(missing)}", file=file, path="header")
    reader.fieldnames = header
    return [dict(r) for r in reader]


def _num(text) -> float | None:
    try:
        v = float(text)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) and v > 0 else None




@dataclass(frozen=True)
class OpRow:
    """One measured operating point (a Server or Interactive run)."""

    version: str
    hardware: str
    model: str
    scenario: str
    """MLPerf scenario, lower case (``server`` / ``interactive``)."""
    submitter: str
    system: str
    accelerators: int
    occupancy: float
    """Mean queries in flight over the whole system (LoadGen, Little's law)."""
    tpot_mean_s: float
    """Measured mean time per output token, seconds."""
    key: PredictionKey
    tokens_per_sample: float | None = None
    """LoadGen's generated tokens per sample of the run (its mean output length), when recorded."""

    @property
    def label(self) -> str:
        return f"{self.version} {self.submitter} {self.system} {self.model} {self.scenario}"


def load_op_rows(path: str | os.PathLike | None = None, presets_dir: str | os.PathLike | None = None
                 ) -> list[OpRow]:
    """Usable operating points of ``path`` (default: the bundled operating points)."""
    rounds = preset_rounds(presets_dir)
    out: dict[tuple, OpRow] = {}
    for cols in load(path or bundled_data()):
        scen = cols.get("scenario", "").strip().lower()
        hw = hardware_id(cols)
        occ, tpot = _num(cols.get("mean_inflight_queries")), _num(cols.get("tpot_mean_ms"))
        n = _num(cols.get("total_accelerators"))
        if scen not in ("server", "interactive") or hw is None or not (occ and tpot and n):
            continue
        model = model_id(cols.get("benchmark", ""))
        version = cols["version"].strip()
        key = PredictionKey(resolve_preset(version, presets_dir, rounds=rounds), hw, model, f"mlperf-{model}-{scen}",
                            int(n))
        ident = (version, cols.get("submitter", ""), cols.get("system", ""), model, scen, int(n), occ, tpot)
        out.setdefault(ident, OpRow(version, hw, model, scen, cols.get("submitter", "").strip(),
                                    cols.get("system", "").strip(), int(n), occ, tpot * 1e-3, key,
                                    _num(cols.get("tokens_per_sample"))))
    return list(out.values())


def usable(rows: Iterable[OpRow], hardware: Iterable[str] | None = None, models: Iterable[str] | None = None
           ) -> list[OpRow]:
    """Rows whose hardware and model have bundled profiles (and are in ``hardware`` when given)."""
    from ..specs import catalog

    hw_ok = set(catalog.list_ids("hardware")) if hardware is None else set(hardware)
    model_ok = set(catalog.list_ids("model")) if models is None else set(models)
    return [r for r in rows if r.hardware in hw_ok and r.model in model_ok]


def held_out(rows: Sequence[OpRow], field: str, value: str) -> list[OpRow]:
    """Rows not matching ``field == value`` (cross-validation's training operating points)."""
    return [r for r in rows if getattr(r, field) != value]


__all__ = ["OpRow", "load_op_rows", "usable", "held_out", "REQUIRED", "HARDWARE_RULES", "bundled_data", "hardware_id",
           "model_id", "load"]
