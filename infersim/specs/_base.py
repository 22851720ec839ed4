"""Spec base class: frozen pydantic models, unknown keys rejected, errors that name the field.

Every profile is plain YAML read with a safe loader (``infersim.files``: no tags, no templating,
regular files of bounded size) and validated once into a frozen tree. Validation is strict: a
number must be written as a number (no "5" or true where 5 is meant) and an integer field takes
no fractional value. Validation errors become ``SpecError`` naming the file and the dotted field
path.
"""

from __future__ import annotations

import datetime as _dt
import re
from pathlib import Path
from typing import Annotated, Any, TypeVar

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from .. import files
from ..errors import SpecError

S = TypeVar("S", bound="Spec")

DateStr = Annotated[str, BeforeValidator(lambda v: v.isoformat() if isinstance(v, (_dt.date, _dt.datetime)) else v),
                    Field(pattern=r"^\d{4}-\d{2}(-\d{2})?([T ].*)?$")]
"""A date written as YYYY-MM or YYYY-MM-DD (YAML may parse the latter as a date)."""


class Spec(BaseModel):
    """Base of every spec: frozen, extra keys forbidden; the attribute docstrings become the JSON
    Schema's descriptions when one is asked for (``specs.docs``)."""

    def model_copy(self, *, update: dict[str, Any] | None = None, deep: bool = False):
        """A copy with ``update`` applied *and validated*; derived (cached) quantities are
        recomputed rather than copied stale from the original."""
        if not update:
            return super().model_copy(deep=deep)
        return type(self).model_validate({**self.model_dump(), **update})

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        validate_default=True,
        allow_inf_nan=False,
        strict=True,
    )


def format_validation_error(err: ValidationError, data: Any = None) -> tuple[str, str]:
    """First error of a pydantic ValidationError as (dotted path, message).

    With the validated ``data`` the path keeps only the parts that are keys (or list indices) of
    the document, plus a final missing key; pydantic's union-branch labels (``literal[...]``,
    ``float``, discriminator values) are dropped.
    """
    first = err.errors()[0]
    loc = first.get("loc", ())
    if data is None:
        path = ".".join(str(p) for p in loc if not _is_union_tag(p))
    else:
        path = _document_path(loc, data, missing=first.get("type") == "missing")
    msg = first.get("msg", "invalid value")
    # cross-field validators name the offending sub-field as "field: message"
    sub = re.match(r"^Value error, ([a-z_][a-z0-9_]*): (.*)$", msg, re.S)
    if sub:
        path = f"{path}.{sub.group(1)}" if path else sub.group(1)
        msg = sub.group(2)
        return path, msg
    got = first.get("input")
    if first.get("type") not in ("missing",) and not isinstance(got, (dict, list)):
        text = repr(got)
        msg = f"{msg} (got {text[:60]})"
    return path or "<root>", msg


def _document_path(loc: tuple, data: Any, missing: bool) -> str:
    parts, node = [], data
    for i, part in enumerate(loc):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        elif not (missing and i == len(loc) - 1 and isinstance(node, dict)):
            continue  # a union-branch label; a missing key is the last part, inside a mapping
        parts.append(str(part))
    return ".".join(parts)


def _is_union_tag(part: Any) -> bool:
    # pydantic inserts the discriminator value / model name into locs of tagged unions;
    # keep the path readable by dropping names that are not YAML keys.
    return isinstance(part, str) and (part.startswith("function-") or part in _TAGS)


_TAGS = {"mha", "gqa", "mla", "offline", "server", "interactive"}


def read_yaml(path: Path) -> Any:
    """Read a YAML file safely (regular file, size-limited, libyaml's safe loader where
    available); any failure is a SpecError naming the file."""
    return files.read_yaml(path)


def validate_data(cls: type[S], data: Any, *, file: str | None = None) -> S:
    """Validate a parsed mapping into ``cls``; errors become SpecError with the field path."""
    if not isinstance(data, dict):
        kind = type(data).__name__ if data is not None else "an empty document"
        raise SpecError(f"expected a mapping of fields at the top level, got {kind}", file=file)
    try:
        return cls.model_validate(data)
    except ValidationError as err:
        path, msg = format_validation_error(err, data)
        raise SpecError(msg, file=file, path=path) from None
    except (ValueError, TypeError, OverflowError) as exc:  # raised inside validators
        raise SpecError(str(exc), file=file) from None


def load_spec(cls: type[S], path: Path | str) -> S:
    """Load and validate one YAML spec file."""
    path = Path(path)
    return validate_data(cls, read_yaml(path), file=str(path))


def dump_spec(spec: Spec) -> str:
    """Serialize a spec back to YAML (round-trips through ``validate_data``)."""
    data = spec.model_dump(mode="json", exclude_none=False, by_alias=True)
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)
