"""Published rows: reading a validation CSV, the frontier, and the preset round of each row.

A row is one published result (columns of ``data/mlperf_llm_results.csv``); the *frontier* is
the best published result per (version, hardware, model, scenario, accelerators). Each row is
predicted under the round preset of its version, or of the nearest earlier round with a preset.
"""

from __future__ import annotations

import csv
import io
import math
import os
import stat
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from ..errors import SpecError

REQUIRED_COLUMNS: tuple[str, ...] = ("version", "hardware", "model", "scenario", "accelerators", "tokens_per_s")
"""Columns every validation CSV must have (others are carried through and otherwise ignored)."""

GROUP_FIELDS: tuple[str, ...] = ("version", "hardware", "model", "scenario", "accelerators")
"""A frontier group: the best published row per these fields is the frontier row."""

MAX_CSV_BYTES = 64 * 1024 * 1024
"""Largest validation CSV read, bytes (the bundled one is ~100 kB)."""


def bundled_data() -> Path:
    """Path of the bundled MLPerf results CSV (``data/mlperf_llm_results.csv``)."""
    from ..specs.catalog import bundled_root

    return bundled_root() / "data" / "mlperf_llm_results.csv"


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
    def power_mode(self) -> str:
        """The run's power configuration where it is not the part's standard board power (column
        ``power_mode``, e.g. ``TGP 1000 W`` or ``MaxQ``); empty for a run at the standard power."""
        return (self.columns.get("power_mode") or "").strip()

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


NOT_MODELLED = "not modelled:"
"""Prefix of the reason of a row the model does not describe (reported apart from failures)."""

MAX_VALUE = 1e12
"""Largest accepted tokens/s or accelerator count in a results CSV."""


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
    if value > MAX_VALUE:  # no system publishes more: a typo, and it would overflow plot axes
        raise SpecError(f"expected at most {MAX_VALUE:.0e}, got {text.strip()[:40]!r}", file=file, path=where)
    if integer and value != int(value):
        raise SpecError(f"expected a whole number of accelerators, got {text.strip()[:40]!r}", file=file, path=where)
    return value


def _read_regular(path: Path) -> bytes:
    """Bytes of a regular file (FIFOs, devices and folders are refused, not read)."""
    file = str(path)
    try:
        st = path.stat()
    except OSError as exc:
        raise SpecError(f"cannot read file ({exc.strerror})", file=file) from None
    if not stat.S_ISREG(st.st_mode):
        raise SpecError("not a regular file; expected a CSV file", file=file)
    if st.st_size > MAX_CSV_BYTES:
        raise SpecError(f"file too large ({st.st_size} bytes; at most {MAX_CSV_BYTES})", file=file)
    try:
        return path.read_bytes()
    except OSError as exc:
        raise SpecError(f"cannot read file ({exc.strerror})", file=file) from None


def as_rows(rows: Iterable[Row] | str | os.PathLike) -> list[Row]:
    """The rows of a validation CSV given by path, or the given rows as a list."""
    return load_rows(rows) if isinstance(rows, (str, os.PathLike)) else list(rows)


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
        Unreadable or non-regular file, missing column, or a non-numeric / non-positive
        ``accelerators`` or ``tokens_per_s``; the message names the file, row and column.
    """
    file = str(path)
    try:
        text = _read_regular(Path(path)).decode("utf-8-sig")
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


def frontier_mask(rows: Sequence[Row]) -> list[bool]:
    """True for each row that is its group's best published result (the first one on ties).

    A group is (version, hardware, model, scenario, accelerators); each group with a row at the
    part's standard power has exactly one frontier row. A run at another power configuration
    (``Row.power_mode``) is never a frontier row: the hardware profile does not describe it.
    """
    best: dict[tuple, int] = {}
    for i, r in enumerate(rows):
        if r.power_mode:
            continue
        j = best.get(r.group)
        if j is None or r.tokens_per_s > rows[j].tokens_per_s:
            best[r.group] = i
    chosen = set(best.values())
    return [i in chosen for i in range(len(rows))]


class PredictionKey(NamedTuple):
    """What a prediction depends on; rows sharing a key share one prediction."""

    preset: str
    """Round whose software preset is used (the row's version, or the nearest earlier preset)."""
    hardware: str
    model: str
    scenario: str
    """Scenario profile ID (``mlperf-MODEL-SCENARIO``)."""
    accelerators: int


def version_key(name: str) -> tuple[int, ...]:
    """Sort key of a round name ``vX.Y``; SpecError for anything else."""
    from ..optimizations.presets import _version_key

    return _version_key(name)


def preset_rounds(presets_dir: str | os.PathLike | None = None) -> list[str]:
    """Rounds with a preset in ``presets_dir`` (default: the bundled presets), oldest first."""
    from ..optimizations import presets

    if presets_dir is None:
        return presets.list_rounds()
    return sorted((p.stem for p in Path(presets_dir).glob("v*.yaml")), key=version_key)


def resolve_preset(version: str, presets_dir: str | os.PathLike | None = None, *,
                   rounds: Sequence[str] | None = None) -> str:
    """The preset round used for a data round: itself, else the nearest earlier, else the earliest.

    ``rounds`` (from :func:`preset_rounds`) saves listing the presets folder per call. Raises
    SpecError for a version not of the form vX.Y or when there are no presets.
    """
    key = version_key(version)
    rounds = list(rounds) if rounds is not None else preset_rounds(presets_dir)
    if not rounds:
        raise SpecError("no round presets (vX.Y.yaml) found", file=str(presets_dir) if presets_dir else None)
    earlier = [r for r in rounds if version_key(r) <= key]
    return earlier[-1] if earlier else rounds[0]


def row_keys(rows: Sequence[Row], presets_dir=None) -> list[PredictionKey | str]:
    """The prediction key of each row, or the reason it has none (a bad version, or a power
    configuration the hardware profile does not describe: ``NOT_MODELLED``)."""
    rounds = preset_rounds(presets_dir)
    out: list[PredictionKey | str] = []
    for r in rows:
        if r.power_mode:
            out.append(f"{NOT_MODELLED} power mode '{r.power_mode}' (the '{r.hardware}' profile describes the part "
                       "at its standard board power)")
            continue
        try:
            preset = resolve_preset(r.version, presets_dir, rounds=rounds)
        except SpecError as exc:
            out.append(f"bad input: version '{r.version}': {exc.detail}")
            continue
        out.append(PredictionKey(preset, r.hardware, r.model, r.scenario_id, r.accelerators))
    return out


def data_label(file: str) -> str:
    """Provenance label of a data file: its name and the first 12 hex digits of its SHA-256."""
    import hashlib

    path = Path(file)
    if not path.is_file():
        return file
    return f"{path.name} (sha256 {hashlib.sha256(path.read_bytes()).hexdigest()[:12]})"


__all__ = ["REQUIRED_COLUMNS", "GROUP_FIELDS", "Row", "PredictionKey", "bundled_data", "make_row", "load_rows",
           "frontier_mask", "NOT_MODELLED", "preset_rounds", "resolve_preset", "row_keys", "data_label", "version_key"]
