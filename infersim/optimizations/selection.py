"""Which transforms a prediction evaluates: a round's applied optimizations, its choices, the
scenario's list and the user's toggles, resolved into the optimization variants the search tries.

Each transform decides for itself whether it can act on a system (``Transform.skip_reason``)
and which settings the search tries (``Transform.search_variants``); nothing here knows an
optimization by name.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from ..errors import SpecError
from .base import REGISTRY, Context, Transform, make


@dataclass(frozen=True)
class Selection:
    """The resolved toggles: what is always applied, what the search may add, and what was
    skipped (kind → reason) because it cannot act on this system."""

    forced: tuple[Transform, ...]
    choices: tuple[Transform, ...]
    skipped: dict[str, str] = field(default_factory=dict)
    exact: frozenset[str] = frozenset()
    """Kinds whose settings the user fixed (the search does not try other variants of them)."""

    def variants(self) -> list[list[Transform]]:
        """Every transform set to evaluate: the forced ones, plus each subset of the choices, with
        each round-provided transform expanded to its search variants."""
        out: list[list[Transform]] = []
        for mask in itertools.product((False, True), repeat=len(self.choices)):
            chosen = list(self.forced) + [t for on, t in zip(mask, self.choices) if on]
            options = [[t] if (t.kind in self.exact or not t.enabled) else t.search_variants() for t in chosen]
            out.extend(list(combo) for combo in itertools.product(*options))
        return out


def _check_known(names) -> None:
    for name in names:
        if name not in REGISTRY:
            raise SpecError(f"unknown optimization '{name}' (known: {', '.join(sorted(REGISTRY))})")


def select(ctx: Context, *, applied: list[dict] = (), offered: list[dict] = (), scenario: list[dict] = (),
           enable: list[str] = (), disable: list[str] = (), params: dict[str, dict[str, Any]] | None = None
           ) -> Selection:
    """Resolve the toggles of one prediction.

    Parameters
    ----------
    ctx : what the system has (MoE, MTP heads, shared prefixes, latency limits).
    applied, offered : a round preset's ``optimizations`` and ``choices`` ({kind, params...}).
    scenario : the scenario's ``optimizations`` entries (always applied).
    enable, disable : optimization kinds the user forces on or off (disable wins).
    params : user parameters per kind (``--set KIND.PARAM=VALUE``); they fix that setting.

    Notes
    -----
    A transform that cannot act on the system (``needs``) is skipped with its reason; a round's
    optional transform is searched only where it can help (``choice_needs``), while an explicit
    request still applies it.
    """
    params = params or {}
    _check_known(list(enable) + list(disable) + list(params))
    both = set(enable) & set(disable)
    if both:
        raise SpecError(f"optimization(s) both enabled and disabled: {', '.join(sorted(both))}")
    forced: dict[str, dict] = {}
    choices: dict[str, dict] = {}
    for entry in applied:
        forced[entry["kind"]] = {k: v for k, v in entry.items() if k != "kind"}
    for entry in offered:
        choices[entry["kind"]] = {k: v for k, v in entry.items() if k != "kind"}
    explicit: set[str] = set()
    for entry in scenario:
        data = dict(entry)
        kind = data.pop("kind")
        _check_known([kind])
        forced[kind] = {**forced.get(kind, {}), **data}
        choices.pop(kind, None)
        explicit.add(kind)
    for kind in enable:
        forced[kind] = {**choices.pop(kind, {}), **forced.get(kind, {})}
        explicit.add(kind)
    for kind, p in params.items():
        if kind in forced:
            forced[kind] = {**forced[kind], **p}
        elif kind in choices:
            choices[kind] = {**choices[kind], **p}
        else:
            forced[kind] = dict(p)
    for kind in disable:  # last: a disabled optimization stays off whatever else asked for it
        forced.pop(kind, None)
        choices.pop(kind, None)
    skipped: dict[str, str] = {}
    kept_forced, kept_choices = [], []
    for kind, p in forced.items():
        t = make(kind, p, where="optimizations")
        why = t.skip_reason(ctx)
        if why is None:
            kept_forced.append(t)
        else:
            skipped[kind] = why
    for kind, p in choices.items():
        t = make(kind, p, where="optimizations")
        why = t.skip_reason(ctx, as_choice=kind not in explicit)
        if why is None:
            kept_choices.append(t)
        else:
            skipped[kind] = why
    return Selection(tuple(kept_forced), tuple(kept_choices), skipped, frozenset(params))
