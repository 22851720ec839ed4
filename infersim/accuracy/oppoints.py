"""Operating points as fit data: the iteration time a run measured at the load it ran.

A Server/Interactive throughput row fixes one point of the engine's load curve, at a load the
submitter chose. The operating-point data (``data/mlperf_operating_points.csv``, from LoadGen's
detailed logs; source: shared/reference/mlperf_operating_points.csv) also give, per run, the
scheduled rate and the latency percentiles. The model's mean TPOT at the run's *steady-state*
occupancy is the step cost of that batch plus its prefill stalls, independent of how load maps to
occupancy; a residual ``log(model / measured)`` per run pins the step-cost curve at the operating
point (the throughput rows pin it at capacity).

Steady state, not the run's averages: LoadGen's means cover the whole run, its ramp (the first
queries decode in a small batch) and its drain (the last queries finish while the batch empties),
so the mean TPOT sits below the steady TPOT (measured p50 / mean: median 1.006, 1.02 on Llama-2-70B
Server, 1.06 on the MI325X runs) and the mean in flight (``mean_inflight_queries`` = completed rate ×
mean latency) below the steady occupancy. The pair used is the TPOT p50 (what
``infersim validate --at-load`` scores) and the decode batch that carries the scheduled rate at
that TPOT, B = λ · tokens per sample · TPOT p50: the model's own relation between rate and
occupancy (``serving.request_rate``: a request stays OSL tokens in the decode batch; the queries
still waiting for their first token are not in it). A model TPOT equal to the measured one at B
is then exactly the measured TPOT at the measured load. Measured 2026-11-26 (two calibrate passes
each, from the same start): this pair 8.98 % at-load TPOT p50; counting the TTFT wait in the
occupancy (Little's law on the whole latency) 9.07 %; the run means (LoadGen's mean in flight and
mean TPOT, shipped until then) 10.8 %; one pass each: (tokens − 1) in place of tokens 10.2 %
against 8.2 %, the p50 at LoadGen's mean in flight (an inconsistent pair) 13.7 %, the means at
their own steady batch 10.3 %. The at-load median moves by a point for a 0.4 % change of the
occupancy because near a run's rate limit the error is amplified up to tenfold (``fit.op_residual``).
A run without those columns falls back to ``mean_inflight_queries`` and the mean TPOT.

The CSV reader (columns, hardware and model mapping) lives here and ``infersim.at_load`` uses it.

Rows used: Server and Interactive runs with a hardware profile, an occupancy and a TPOT;
duplicate runs (the -99 and -99.9 accuracy variants of one run) count once.
"""

from __future__ import annotations

import csv
import functools
import io
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import SpecError
from ..run_settings import RUN_KEY, _num, load_engine_settings, run_fields
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


def steady_point(cols: dict[str, str]) -> tuple[float | None, float | None]:
    """(decode occupancy over the whole system, TPOT in ms) of a run in steady state (module
    docstring): λ · tokens per sample · TPOT p50 and the TPOT p50; else LoadGen's mean in flight
    and mean TPOT."""
    lam, tpot, tokens = (_num(cols.get(k)) for k in ("scheduled_samples_per_s", "tpot_p50_ms", "tokens_per_sample"))
    if lam and tpot and tokens:
        return lam * tokens * tpot * 1e-3, tpot
    return _num(cols.get("mean_inflight_queries")), _num(cols.get("tpot_mean_ms"))


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
    """Steady-state decode batch over the whole system (``steady_point``)."""
    tpot_s: float
    """Measured steady-state time per output token (its p50), seconds."""
    key: PredictionKey
    tokens_per_sample: float | None = None
    """LoadGen's generated tokens per sample of the run (its mean output length), when recorded."""
    run: tuple[tuple[str, str], ...] = ()
    """The run's own engine settings and layout (``run_settings.run_fields`` of its row in
    ``data/mlperf_engine_settings.csv``); empty where the run is not there: the round preset's
    engine on the capacity search's layout."""

    @property
    def label(self) -> str:
        return f"{self.version} {self.submitter} {self.system} {self.model} {self.scenario}"


def load_op_rows(path: str | os.PathLike | None = None, presets_dir: str | os.PathLike | None = None,
                 run_settings: bool = True) -> list[OpRow]:
    """Usable operating points of ``path`` (default: the bundled operating points), each with its
    run's own engine settings and layout where ``run_settings`` and the run is in
    ``data/mlperf_engine_settings.csv`` (``OpRow.run``)."""
    rounds = preset_rounds(presets_dir)
    settings = load_engine_settings() if run_settings else {}
    out: dict[tuple, OpRow] = {}
    for cols in load(path or bundled_data()):
        scen = cols.get("scenario", "").strip().lower()
        hw = hardware_id(cols)
        occ, tpot = steady_point(cols)
        n = _num(cols.get("total_accelerators"))
        if scen not in ("server", "interactive") or hw is None or not (occ and tpot and n):
            continue
        model = model_id(cols.get("benchmark", ""))
        version = cols["version"].strip()
        key = PredictionKey(resolve_preset(version, presets_dir, rounds=rounds), hw, model, f"mlperf-{model}-{scen}",
                            int(n))
        ident = (version, cols.get("submitter", ""), cols.get("system", ""), model, scen, int(n), occ, tpot)
        run = run_fields(settings.get(tuple(cols.get(k, "").strip() for k in RUN_KEY)))
        out.setdefault(ident, OpRow(version, hw, model, scen, cols.get("submitter", "").strip(),
                                    cols.get("system", "").strip(), int(n), occ, tpot * 1e-3, key,
                                    _num(cols.get("tokens_per_sample")), run))
    return list(out.values())


def limit_share(cols: dict[str, str]) -> float | None:
    """The run's tighter latency percentile as a share of its limit: max(TTFT p99 / TTFT limit,
    TPOT p99 / TPOT limit) (LoadGen's ``*_p99_over_limit`` columns, else computed from the ms
    columns); None where neither pair is recorded."""
    shares = []
    for kind in ("ttft", "tpot"):
        v = _num(cols.get(f"{kind}_p99_over_limit"))
        if v is None:
            p99, lim = _num(cols.get(f"{kind}_p99_ms")), _num(cols.get(f"{kind}_limit_ms"))
            v = p99 / lim if p99 and lim else None
        if v is not None:
            shares.append(v)
    return max(shares) if shares else None


AT_LIMIT_SHARE = 0.85
"""A Server/Interactive run whose tighter latency p99 ended at or above this share of its limit
(``limit_share``) ran at its capacity; below it, the submitter's load passed with room to spare and
its published rate is a lower bound on the system's capacity. Measured on main (2026-11-26,
``infersim validate`` against these runs): frontier rows with a share under 0.5 are +15 … +27 %
(median signed error), 0.5-0.85 +8 … +10 %, 0.85 and above +0.1 … +0.6 % (``benchmarks/accuracy.py``
prints the split)."""

LOAD_CLASSES: tuple[str, ...] = ("at_limit", "below_limit", "no_record")
"""``load_class`` values: the run ended at its latency limit, below it, or has no latency record
(Offline, rounds before v5.1, rows without submitter and system)."""


def load_class(version: str, submitter: str, system: str, model: str, scenario: str,
               shares: dict | None = None) -> tuple[str, float | None]:
    """(``LOAD_CLASSES`` entry, limit share) of a published row, looked up in ``shares`` (default:
    the bundled operating points' ``limit_shares``)."""
    table = _bundled_shares() if shares is None else shares
    share = table.get((version.strip(), submitter.strip(), system.strip(), model.strip(), scenario.strip().lower()))
    if share is None:
        return "no_record", None
    return ("at_limit" if share >= AT_LIMIT_SHARE else "below_limit"), share


@functools.cache
def _bundled_shares() -> dict[tuple[str, str, str, str, str], float]:
    return limit_shares()


def limit_shares(path: str | os.PathLike | None = None) -> dict[tuple[str, str, str, str, str], float]:
    """{(version, submitter, system, model, scenario in lower case): ``limit_share``} of every
    Server/Interactive run of ``path`` (default: the bundled operating points) that records it; the
    -99 and -99.9 variants of one run keep the larger share."""
    out: dict[tuple[str, str, str, str, str], float] = {}
    for cols in load(path or bundled_data()):
        scen = cols.get("scenario", "").strip().lower()
        share = limit_share(cols)
        if scen not in ("server", "interactive") or share is None:
            continue
        k = (cols["version"].strip(), cols.get("submitter", "").strip(), cols.get("system", "").strip(),
             model_id(cols.get("benchmark", "")), scen)
        out[k] = max(share, out.get(k, 0.0))
    return out


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


__all__ = ["OpRow", "steady_point", "limit_share", "limit_shares", "load_class", "AT_LIMIT_SHARE",
           "LOAD_CLASSES", "load_op_rows", "usable", "held_out", "REQUIRED", "HARDWARE_RULES", "bundled_data", "hardware_id",
           "model_id", "load"]
