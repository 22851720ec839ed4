"""Writing fitted values: copies under an output folder, or (only when asked) the files in place.

``--out DIR`` always means copies (``DIR/hardware_profiles/ID.yaml``, ``DIR/presets/vX.Y.yaml``);
a DIR that is the bundled profile root, inside a bundled profile folder or a profile folder on
the search path is refused, as is any copy that would land on a file the fit read or on a file
that is not an earlier calibrate output. ``in_place`` edits exactly the files the fit read.
Every file is edited with comments kept (``yamledit``), verified, and only then are all of
them written, each atomically.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from ..errors import SpecError
from ..report import write_atomic
from .fit import round_sig
from .result import CalibrationResult
from .params import value_bound_findings

_PROFILE_FOLDERS = ("hardware_profiles", "model_profiles", "scenarios", "presets", "data")


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def check_out_dir(out_dir: str | os.PathLike) -> Path:
    """The output folder, or SpecError when writing there could touch profiles in use."""
    from ..specs import catalog

    out = Path(out_dir).expanduser().resolve()
    flag = f"--out {out_dir}"
    if out.exists() and not out.is_dir():
        raise SpecError(f"{flag}: not a folder; expected a folder for the calibrated copies")
    root = catalog.bundled_root().resolve()
    if out == root:
        raise SpecError(f"{flag}: is the project's bundled profile root; --out writes copies elsewhere "
                        "(use --in-place to edit the bundled files)")
    protected = [root / f for f in _PROFILE_FOLDERS]
    for kind in ("hardware", "model", "scenario", "preset"):
        for d in catalog.search_dirs(kind):
            d = d.resolve()
            protected.append(d)
            if d.name == catalog.FOLDERS[kind] and out == d.parent:
                raise SpecError(f"{flag}: is a profiles folder on the search path; --out never means in place "
                                "(give a new folder, or --in-place)")
    for p in protected:
        if _inside(out, p):
            raise SpecError(f"{flag}: is inside the profile folder {p}; --out never means in place "
                            "(give a new folder, or --in-place)")
    return out


def _record(result: CalibrationResult, owner: str, names, *, rows: int | None = None, data: str | None = None,
            median: float | None = None) -> dict[str, Any]:
    info = result.by_owner.get(owner, {})
    med = info.get("median_ape") if median is None else median
    return {"data": data or result.data, "date": result.date,
            "rows": int(info.get("rows", result.rows) if rows is None else rows),
            "residual_median_ape": round_sig(med) if med is not None else 0.0, "parameters": list(names),
            "findings": result.owner_findings(owner)}


def _preset_source(result: CalibrationResult, round_name: str) -> Path:
    from ..optimizations.presets import _preset_files, presets_dir

    if result.presets_dir:
        return Path(result.presets_dir) / f"{round_name}.yaml"
    return _preset_files().get(round_name, presets_dir() / f"{round_name}.yaml")


def _is_calibrate_output(path: Path, section: str | None) -> bool:
    from ..specs._base import read_yaml

    try:
        data = read_yaml(path)
    except SpecError:
        return False
    target = data.get(section) if isinstance(data, dict) and section else data
    return isinstance(target, dict) and isinstance(target.get("calibration"), dict)


def plan(result: CalibrationResult, out_dir: str | os.PathLike | None = None, *, in_place: bool = False
         ) -> list[tuple[Path, Path, str | None, dict[str, float], dict[str, Any], type]]:
    """(source, destination, section, values, record, spec class) of every file ``write`` would write."""
    from ..optimizations.presets import PresetSpec
    from ..specs import catalog
    from ..specs.hardware import HardwareSpec

    if in_place and out_dir is not None:
        raise SpecError("give either an output folder (--out) or --in-place, not both")
    target = None if in_place else check_out_dir(out_dir if out_dir is not None else "calibrated")
    plans = []
    for hw_id, values in result.hardware.items():
        src = Path(result.hardware_files.get(hw_id) or catalog.resolve("hardware", hw_id))
        dst = src if in_place else target / "hardware_profiles" / src.name
        plans.append((src, dst, "efficiency", values, _record(result, hw_id, values), HardwareSpec))
    if not in_place:  # fleet-prior values go to copies only
        for hw_id, values in result.transferred.items():
            src = Path(catalog.resolve("hardware", hw_id))
            why = result.transfer_reasons.get(hw_id, "no rows for this hardware")
            rec = _record(result, hw_id, values, rows=0, data=f"fleet prior from {result.data} ({why})",
                          median=result.after.get("median_ape") or 0.0)
            rec["findings"] = rec["findings"] + value_bound_findings(
                hw_id, values, "the fleet prior (the measured fleet's median calibrated/default ratio) puts it there")
            plans.append((src, target / "hardware_profiles" / src.name, "efficiency", values, rec, HardwareSpec))
    for rnd, values in result.presets.items():
        src = _preset_source(result, rnd)
        dst = src if in_place else target / "presets" / src.name
        plans.append((src, dst, None, values, _record(result, rnd, values), PresetSpec))
    if not in_place:
        sources = [s.resolve() for s, *_ in plans]
        for src, dst, section, *_ in plans:
            if dst.exists():
                if dst.resolve() in sources or any(s.exists() and os.path.samefile(dst, s) for s in sources):
                    raise SpecError("would overwrite a profile the fit read; --out never means in place", file=str(dst))
                if not _is_calibrate_output(dst, section):
                    raise SpecError("exists and is not an earlier calibrate output; not overwritten "
                                    "(move it or choose another --out)", file=str(dst))
    return plans


def write(result: CalibrationResult, out_dir: str | os.PathLike | None = None, *, in_place: bool = False) -> list[Path]:
    """Write fitted values with a ``calibration:`` provenance record (data, date, rows, residual,
    parameters, findings).

    Parameters
    ----------
    result : from :func:`infersim.accuracy.calibrate`.
    out_dir : folder for the copies (default ``./calibrated``), usable as ``--profiles-dir OUT``.
    in_place : edit the files the fit read instead (hardware without its own fit never).

    Returns
    -------
    list of written paths. A fit restricted to some hardware writes only their profiles.
    """
    from .yamledit import edited_text

    plans = plan(result, out_dir, in_place=in_place)
    texts = []
    for src, dst, section, values, record, cls in plans:
        owner = src.stem
        defaults = {n: result.defaults[f"{owner}.{n}"] for n in values if f"{owner}.{n}" in result.defaults}
        texts.append((dst, edited_text(src, section, values, record, cls, defaults)))
    written = [write_atomic(dst, text.encode("utf-8")) for dst, text in texts]
    if not in_place and result.presets and result.scope is None:
        # a usable presets folder: the rounds not fitted are copied unchanged
        folder = Path(out_dir if out_dir is not None else "calibrated") / "presets"
        from .data import preset_rounds

        for r in preset_rounds(result.presets_dir):
            src, dst = _preset_source(result, r), folder / f"{r}.yaml"
            if not dst.exists():
                shutil.copyfile(src, dst)
                written.append(dst)
    return written


__all__ = ["write", "plan", "check_out_dir"]
