"""Pure argument checks of a prediction request: every flag in range before any work is done.

Each check raises ``SpecError`` (CLI exit 2) with one line naming the flag (or the file and field),
what was given and what is expected. Nothing here computes a result; ``query.Query.build`` calls
``check_request`` first, the CLI calls ``parse_param_overrides`` and ``check_tco``.
"""

from __future__ import annotations

import math
import numbers
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import yaml
from pydantic import ConfigDict, TypeAdapter, ValidationError

from . import optimizations as opt
from .errors import SpecError
from .files import YAML_LOADER
from .specs import catalog

MAX_ACCELERATORS = 1_000_000
MAX_BATCH = 1_000_000
MAX_PRICE_USD_PER_HOUR = 1e6
"""Upper end of an accelerator-hour price, US$ (bundled prices are 0.5-15 $/h)."""


def _is_real(v: Any) -> bool:
    """A finite plain number (not a bool; an int beyond float's range is not finite)."""
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        return False
    try:
        return math.isfinite(float(v))
    except OverflowError:
        return False


def _is_integral(v: Any) -> bool:
    return _is_real(v) and float(v) == int(v)


def check_count(flag: str, value: Any, lo: int, hi: int, unit: str = "") -> None:
    """``value`` must be a whole number in [lo, hi]."""
    if not _is_integral(value) or not lo <= value <= hi:
        raise SpecError(f"{flag} must be a whole number in [{lo}, {hi:,}]{unit} (got {value!r})")


def _all_reals(values: tuple, lo: float, hi: float) -> bool:
    """Every value a finite number in [lo, hi] (plain ints and floats; a long axis at once)."""
    if not values or not set(map(type, values)) <= {int, float}:
        return not values
    try:
        a = np.asarray(values, dtype=float)
    except OverflowError:  # an int beyond float's range: the per-value check names it
        return False
    return bool(np.all(np.isfinite(a) & (a >= lo) & (a <= hi)))


def check_price(flag: str, value: Any) -> None:
    """A price in US$: a finite number >= 0."""
    if not _is_real(value) or not 0 <= value <= MAX_PRICE_USD_PER_HOUR:
        raise SpecError(f"{flag} must be a finite price in [0, {MAX_PRICE_USD_PER_HOUR:g}] US$ (got {value!r})")


def check_dispatch(dispatch: str | None) -> None:
    """``--dispatch``: one of ``presets.DISPATCH_POLICIES`` (None: the round preset's)."""
    from .optimizations.presets import DISPATCH_POLICIES

    if dispatch is not None and dispatch not in DISPATCH_POLICIES:
        raise SpecError(f"--dispatch must be one of {', '.join(DISPATCH_POLICIES)} (got {dispatch!r})")


def check_tco(capex_usd: float, years: float, pue: float, usd_per_kwh: float) -> None:
    """TCO-mode flags: finite and within physical ranges."""
    for flag, v, lo, hi, strict_lo, unit in (
            ("--tco-capex", capex_usd, 0.0, 1e8, True, "US$"),
            ("--tco-years", years, 0.0, 100.0, True, "years"),
            ("--tco-pue", pue, 1.0, 10.0, False, "(facility power / IT power)"),
            ("--tco-usd-per-kwh", usd_per_kwh, 0.0, 100.0, False, "US$/kWh")):
        bad = not _is_real(v) or v > hi or (v <= lo if strict_lo else v < lo)
        if bad:
            low = f"({lo:g}" if strict_lo else f"[{lo:g}"
            raise SpecError(f"{flag} must be in {low}, {hi:g}] {unit} (got {v!r})")


def bundled_folders() -> tuple[Path, ...]:
    """Bundled profile, preset and data folders: never written without --force / --in-place."""
    root = catalog.bundled_root()
    return tuple(root / name for name in (*catalog.FOLDERS.values(), "data"))


def check_calibrate_out(out: Path) -> None:
    """calibrate --out is a folder for calibrated copies; it never means the bundled profiles."""
    if out.exists() and not out.is_dir():
        raise SpecError("--out must be a folder for the calibrated copies", file=str(out))
    target = out.resolve()
    inside = [p.resolve() for p in bundled_folders()]
    if target == catalog.bundled_root().resolve() or any(target == p or p in target.parents for p in inside):
        raise SpecError("--out points at the bundled profiles; use --in-place to overwrite them, or another folder",
                        file=str(out))


def workload_max_context(workload) -> float:
    """Longest context a request of ``workload`` can reach: largest input + largest output, tokens."""
    def longest(length) -> float:
        return float(length.max) if length.max is not None else float(length.support[0].max())

    return longest(workload.isl) + longest(workload.osl)


def check_context(model, model_id: str, workload) -> None:
    """The workload's longest request must fit the model's ``max_context_tokens``."""
    need = workload_max_context(workload)
    if need > model.max_context_tokens:
        raise SpecError(f"requests reach {need:,.0f} tokens of context (longest input + longest output) but model "
                        f"'{model_id}' supports max_context_tokens {model.max_context_tokens:,}; shorten --isl/--osl "
                        "or the scenario's lengths")


def _values(axis) -> tuple:
    """A layout axis as its values: None → (), a scalar → (v,), a sequence → its items."""
    if axis is None:
        return ()
    return tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)


def check_request(inputs, accelerators=None, *, tp=None, ep=None, dp=None, pp=None, batch=None,
                  price_per_hour=None) -> None:
    """Every argument of a prediction request in range for the resolved ``inputs`` (SpecError
    otherwise). Layout axes may be one value or a sequence of values (a sweep)."""
    n = accelerators
    if n is not None:
        check_count("--accelerators", n, 1, MAX_ACCELERATORS)
    limit = int(n) if n is not None else MAX_ACCELERATORS
    for flag, axis in (("--tp", tp), ("--ep", ep), ("--dp", dp), ("--pp", pp)):
        for v in _values(axis):
            check_count(flag, v, 1, limit, f" (at most the {limit} accelerators)" if n is not None else "")
    wide = [v for v in _values(ep) if v > 1]
    if wide and not inputs.model.is_moe:
        raise SpecError(f"--ep applies only to mixture-of-experts models; '{inputs.model_id}' is dense (got --ep {wide[0]})")
    values = _values(batch)
    if not _all_reals(values, 1, MAX_BATCH):  # the per-value check only to name the bad value
        for v in values:  # a mean occupancy: need not be whole
            if not _is_real(v) or not 1 <= v <= MAX_BATCH:
                raise SpecError(f"--batch must be a number in [1, {MAX_BATCH:,}] sequences per instance (got {v!r})")
    if price_per_hour is not None:
        check_price("--price-per-hour", price_per_hour)
    check_context(inputs.model, inputs.model_id, inputs.scenario.workload)
    check_scenario_optimizations(inputs.scenario, inputs.scenario_id)


def _field_adapter(cls, name: str) -> TypeAdapter:
    info = cls.model_fields[name]
    annotation = Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation
    return TypeAdapter(annotation, config=ConfigDict(strict=True, allow_inf_nan=False))


def parse_param_overrides(items: list[str]) -> dict[str, dict[str, Any]]:
    """'KIND.PARAM=VALUE' strings → {kind: {param: value}}.

    VALUE is read as a YAML scalar or flow list and checked against the parameter's type and
    range in the optimization's own model, strictly (``mtp.depth=2.5`` or ``mtp.depth=yes`` is an
    error, not 2 or 1). Unknown kinds or parameters, and unparsable values, are SpecErrors.
    """
    out: dict[str, dict[str, Any]] = {}
    for item in items:
        key, sep, text = item.partition("=")
        kind, dot, param = key.strip().partition(".")
        if not sep or not dot or not kind or not param:
            raise SpecError(f"--set expects KIND.PARAM=VALUE, e.g. mtp.depth=2 (got '{item[:80]}')")
        if kind not in opt.REGISTRY:
            raise SpecError(f"--set {key}: unknown optimization '{kind}' (known: {', '.join(sorted(opt.REGISTRY))})")
        if param not in opt.REGISTRY[kind].model_fields:
            check_param(kind, param, None, f"--set {key}")
        try:
            value = yaml.load(text, Loader=YAML_LOADER)  # noqa: S506 - a safe loader
        except (yaml.YAMLError, ValueError, OverflowError, TypeError, RecursionError):
            raise SpecError(f"--set {key}: cannot read the value '{text[:40]}' (a number, true/false or a list "
                            "like [0.9, 0.8])") from None
        out.setdefault(kind, {})[param] = check_param(kind, param, value, f"--set {key}", shown=text)
    return out


def check_param(kind: str, param: str, value: Any, where: str, shown: str | None = None) -> Any:
    """``value`` checked strictly against parameter ``param`` of optimization ``kind`` (its type
    and range in the optimization's own model); SpecError naming ``where`` otherwise."""
    cls = opt.REGISTRY[kind]
    if param not in cls.model_fields:
        raise SpecError(f"{where}: '{kind}' has no parameter '{param}' (parameters: {', '.join(sorted(cls.model_fields))})")
    try:
        return _field_adapter(cls, param).validate_python(value)
    except ValidationError as err:
        first = err.errors()[0]
        got = shown if shown is not None else value
        raise SpecError(f"{where}: {first.get('msg', 'invalid value')} (got {str(got)[:40]!r})") from None


def check_scenario_optimizations(scenario, scenario_id: str) -> None:
    """Every entry of a scenario's ``optimizations`` list: a known kind, parameters checked strictly."""
    for i, entry in enumerate(getattr(scenario, "optimizations", ())):
        data = entry.model_dump()
        kind = data.pop("kind")
        where = f"{scenario_id}: optimizations.{i}"
        if kind not in opt.REGISTRY:
            raise SpecError(f"{where}.kind: unknown optimization '{kind}' (known: {', '.join(sorted(opt.REGISTRY))})")
        for param, value in data.items():
            check_param(kind, param, value, f"{where}.{param}")


__all__ = ["bundled_folders", "check_calibrate_out", "check_request", "check_count", "check_price", "check_tco",
           "check_context", "check_param", "check_scenario_optimizations", "parse_param_overrides",
           "workload_max_context"]
