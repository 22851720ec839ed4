"""Transform protocol, stages, registry and composition.

Each optimization is a pydantic model whose fields are its YAML/CLI parameters and whose
``apply(plan)`` returns a new Plan. Transforms run in stage order GRAPH → LAYOUT → SERVING, in the
user's order within a stage. ``enabled: false`` is the neutral setting: an exact no-op.
"""

from __future__ import annotations

from enum import IntEnum
from typing import ClassVar

from pydantic import BaseModel, ConfigDict

from ..errors import SpecError
from ..plan import Plan


class Stage(IntEnum):
    GRAPH = 0
    LAYOUT = 1
    SERVING = 2


class Transform(BaseModel):
    """Base of every optimization transform."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)
    kind: ClassVar[str] = ""
    stage: ClassVar[Stage] = Stage.GRAPH
    conflicts: ClassVar[tuple[str, ...]] = ()
    summary: ClassVar[str] = ""

    enabled: bool = True
    """False keeps the entry but makes it an exact no-op."""

    def apply(self, plan: Plan) -> Plan:
        if not self.enabled:
            return plan
        new = self._apply(plan)
        return new.__class__(**{**new.__dict__, "applied": new.applied + (self.kind,)})

    def _apply(self, plan: Plan) -> Plan:  # pragma: no cover - abstract
        raise NotImplementedError


REGISTRY: dict[str, type[Transform]] = {}


def register(cls: type[Transform]) -> type[Transform]:
    """Class decorator adding a transform to the registry (duplicate kinds are an error)."""
    if cls.kind in REGISTRY:
        raise RuntimeError(f"duplicate optimization kind '{cls.kind}'")
    REGISTRY[cls.kind] = cls
    return cls


def make(kind: str, params: dict | None = None, *, where: str = "optimizations") -> Transform:
    """Instantiate a registered transform from a kind and parameters (SpecError if invalid)."""
    from pydantic import ValidationError

    if kind not in REGISTRY:
        raise SpecError(f"unknown optimization '{kind}' (known: {', '.join(sorted(REGISTRY))})", path=where)
    try:
        return REGISTRY[kind](**(params or {}))
    except ValidationError as err:
        first = err.errors()[0]
        field = ".".join(str(p) for p in first.get("loc", ()))
        raise SpecError(f"{first.get('msg')} (got {first.get('input')!r})", path=f"{where}.{kind}.{field}") from None


def compose(transforms: list[Transform]) -> list[Transform]:
    """Sort by stage (stable: user order within a stage) and reject declared conflicts."""
    active = {t.kind for t in transforms if t.enabled}
    for t in transforms:
        if t.enabled:
            for other in t.conflicts:
                if other in active:
                    raise SpecError(f"optimizations '{t.kind}' and '{other}' cannot be combined")
    return sorted(transforms, key=lambda t: t.stage)


def apply_all(plan: Plan, transforms: list[Transform]) -> Plan:
    for t in compose(transforms):
        plan = t.apply(plan)
    return plan
