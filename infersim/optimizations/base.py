"""Transform protocol, stages, registry and composition.

Each optimization is a pydantic model whose fields are its YAML/CLI parameters and whose
``apply(plan)`` returns a new Plan. Transforms run in stage order GRAPH → LAYOUT → SERVING, in the
user's order within a stage. ``enabled: false`` is the neutral setting: an exact no-op.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum, StrEnum
from typing import ClassVar

from pydantic import BaseModel, ConfigDict

from ..errors import SpecError
from ..plan import Plan


class Stage(IntEnum):
    GRAPH = 0
    LAYOUT = 1
    SERVING = 2


class Needs(StrEnum):
    """What a system must have for an optimization to act (declared by each transform)."""

    MOE = "a mixture-of-experts model"
    MTP_HEADS = "trained multi-token-prediction heads"
    SHARED_PREFIX = "traffic with shareable prompt prefixes"
    LATENCY_LIMIT = "a scenario with latency limits (Server/Interactive)"


@dataclass(frozen=True)
class Context:
    """The facts about a system that decide which optimizations can act on it."""

    is_moe: bool
    has_mtp_heads: bool
    has_shared_prefix: bool
    has_latency_limit: bool

    def has(self, need: Needs) -> bool:
        return {Needs.MOE: self.is_moe, Needs.MTP_HEADS: self.has_mtp_heads,
                Needs.SHARED_PREFIX: self.has_shared_prefix, Needs.LATENCY_LIMIT: self.has_latency_limit}[need]

    def missing(self, needs) -> list[Needs]:
        return [n for n in needs if not self.has(n)]


class Transform(BaseModel):
    """Base of every optimization transform.

    Class attributes declare its behaviour: ``needs`` (without them the transform has nothing to
    act on and is skipped, with the reason reported), ``choice_needs`` (a round preset's optional
    use of it is only searched when these hold; an explicit request still applies it), and
    ``search_variants`` (the settings the search tries for a round's choice).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")  # field docstrings: nothing reads them at run time
    kind: ClassVar[str] = ""
    stage: ClassVar[Stage] = Stage.GRAPH
    conflicts: ClassVar[tuple[str, ...]] = ()
    summary: ClassVar[str] = ""
    rank: ClassVar[int] = 0
    """Position in an ablation waterfall (levers that reshape the graph and layout come first)."""
    needs: ClassVar[tuple[Needs, ...]] = ()
    choice_needs: ClassVar[tuple[Needs, ...]] = ()

    enabled: bool = True
    """False keeps the entry but makes it an exact no-op."""

    def apply(self, plan: Plan) -> Plan:
        if not self.enabled:
            return plan
        new = self._apply(plan)
        return new.__class__(**{**new.__dict__, "applied": new.applied + (self.kind,)})

    def _apply(self, plan: Plan) -> Plan:  # pragma: no cover - abstract
        raise NotImplementedError

    def search_variants(self) -> list["Transform"]:
        """Settings the search tries when a round offers this transform (default: itself)."""
        return [self]

    def skip_reason(self, ctx: Context, *, as_choice: bool = False) -> str | None:
        """Why this transform cannot act on the system (None: it can)."""
        missing = ctx.missing(self.needs + (self.choice_needs if as_choice else ()))
        if not missing:
            return None
        return f"{self.kind} needs {' and '.join(m.value for m in missing)}"


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
