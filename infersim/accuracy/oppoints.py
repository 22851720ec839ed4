"""Operating points as fit data: the iteration time a run measured at the load it ran.

A Server/Interactive throughput row fixes one point of the engine's load curve, at a load the
submitter chose. The operating-point data (``data/mlperf_operating_points.csv``, from LoadGen's
detailed logs; source: shared/reference/mlperf_operating_points.csv) also give, per run, the
mean number of queries in flight (LoadGen's ``mean_inflight_queries``, Little's law) and the mean
time per output token. The model's mean TPOT at that *measured* occupancy is the step cost of
that batch plus its prefill stalls, independent of how load maps to occupancy; a residual
``log(model / measured)`` per run pins the step-cost curve at the operating point (the throughput
rows pin it at capacity).

Rows used: Server and Interactive runs with a hardware profile, a measured mean occupancy and a
measured mean TPOT; duplicate runs (the -99 and -99.9 accuracy variants of one run) count once.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from .data import PredictionKey, preset_rounds, resolve_preset


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

    @property
    def label(self) -> str:
        return f"{self.version} {self.submitter} {self.system} {self.model} {self.scenario}"


def bundled_data() -> Path:
    from ..at_load import bundled_data as _b

    return _b()


def load_op_rows(path: str | os.PathLike | None = None, presets_dir: str | os.PathLike | None = None
                 ) -> list[OpRow]:
    """Usable operating points of ``path`` (default: the bundled operating points)."""
    from ..at_load import _num, hardware_id, load, model_id

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
                                    cols.get("system", "").strip(), int(n), occ, tpot * 1e-3, key))
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


__all__ = ["OpRow", "load_op_rows", "usable", "held_out"]
