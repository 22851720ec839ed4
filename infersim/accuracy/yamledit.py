"""Round-trip YAML edits that keep comments and layout (ruamel.yaml).

A fitted value replaces the old one in place; its end-of-line comment is kept and marked
``calibrated; default X`` with the documented (spec-sheet) default X, so that a later fit and
cross-validation can still find the default. The ``calibration:`` provenance record replaces any
earlier one. Every edit is re-read with the safe loader and checked against the intended data.
"""

from __future__ import annotations

import copy
import datetime as _dt
import io
import re
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from ..errors import SpecError

_DEFAULT = re.compile(r"^calibrated; default ([^,]*)(?:, )?(.*)$", re.S)


def _yaml():
    from ruamel.yaml import YAML

    y = YAML(typ="rt")
    y.preserve_quotes = True
    y.width = 4096
    y.indent(mapping=2, sequence=4, offset=2)
    y.representer.add_representer(type(None), lambda rep, _: rep.represent_scalar("tag:yaml.org,2002:null", "null"))
    y.representer.add_representer(float, _represent_float)
    return y


def _represent_float(rep, value: float):
    """A float as YAML 1.1 readers (PyYAML's safe_load, which the specs use) read it back as a float:
    ruamel writes 1e-10 without a dot, which YAML 1.1 takes for a string; 1.0e-10 it reads."""
    if value != value or value in (float("inf"), float("-inf")):
        return rep.represent_float(value)
    text = repr(float(value))
    if "e" in text and "." not in text.split("e")[0]:
        mant, _, exp = text.partition("e")
        text = f"{mant}.0e{exp}"
    return rep.represent_scalar("tag:yaml.org,2002:float", text)


def _load(text: str, file: str):
    from ruamel.yaml.error import YAMLError

    try:
        return _yaml().load(text)
    except YAMLError as exc:
        raise SpecError(f"invalid YAML: {str(exc).splitlines()[0]}", file=file) from None


def _comment(mapping, key) -> tuple[Any, str]:
    """(comment token or None, text of its first line without '#')."""
    items = getattr(mapping, "ca", None)
    entry = items.items.get(key) if items is not None else None
    tok = entry[2] if entry and len(entry) > 2 else None
    if tok is None:
        return None, ""
    return tok, tok.value.split("\n", 1)[0].strip().lstrip("#").strip()


def documented_defaults(path: str | Path, section: str | None, names, class_defaults: Mapping[str, float]
                        ) -> dict[str, float]:
    """The documented default of each of ``names`` in ``path`` (``section`` mapping or top level).

    A fitted value carries ``# calibrated; default X``; a value calibrate added without a
    comment defaults to the spec field's own default (``class_defaults``); any other value is
    its own default.
    """
    path = Path(path)
    stat = path.stat()
    return dict(_documented(str(path), stat.st_mtime_ns, stat.st_size, section, tuple(names),
                            tuple(sorted((k, float(v)) for k, v in class_defaults.items()))))


@lru_cache(maxsize=128)
def _documented(path: str, mtime_ns: int, size: int, section: str | None, names: tuple[str, ...],
                class_defaults: tuple[tuple[str, float], ...]) -> tuple[tuple[str, float], ...]:
    """``documented_defaults``' parse, once per file version (a round-trip parse costs ~0.1 s and
    cross-validation asks per held-out row)."""
    class_defaults = dict(class_defaults)
    data = _load(Path(path).read_text(encoding="utf-8"), path)
    target = data.get(section) if section is not None else data
    out: dict[str, float] = {}
    fitted = set(((target or {}).get("calibration") or {}).get("parameters") or ())
    for name in names:
        if not target or name not in target:
            out[name] = float(class_defaults[name])
            continue
        tok, text = _comment(target, name)
        m = _DEFAULT.match(text)
        if m:
            try:
                out[name] = float(m.group(1))
                continue
            except ValueError:
                pass
        out[name] = float(class_defaults[name]) if (tok is None and name in fitted) else float(target[name])
    return tuple(out.items())


def _mark(mapping, key, old_value, default_value: float | None = None) -> None:
    """Mark ``key``'s comment as calibrated, keeping the documented default and the old text."""
    tok, text = _comment(mapping, key)
    m = _DEFAULT.match(text)
    default, rest = (m.group(1), m.group(2)) if m else (_scalar_text(old_value), text)
    if default_value is not None:
        default = _scalar_text(float(default_value))
    new = f"calibrated; default {default}" + (f", {rest}" if rest else "")
    if tok is not None:
        first, sep, tail = tok.value.partition("\n")
        tok.value = f"# {new}{sep}{tail}"
    else:
        mapping.yaml_add_eol_comment(new, key)


def _field_default(spec_cls, section: str | None, name: str) -> Any:
    """Default of field ``name`` (of ``section``'s model) for a value the file did not set: the
    documented default a calibrated comment keeps; "unset" where the model gives none."""
    cls = spec_cls
    if section is not None:
        cls = getattr(spec_cls.model_fields.get(section), "annotation", None)
    field = getattr(cls, "model_fields", {}).get(name)
    default = getattr(field, "default", None)
    return default if isinstance(default, (int, float)) and not isinstance(default, bool) else "unset"


def _scalar_text(v: Any) -> str:
    for kind in (bool, int, float, str):  # ruamel's scalar subclasses → plain values
        if isinstance(v, kind):
            v = kind(v)
            break
    return yaml.safe_dump(v).strip().removesuffix("...").strip()


def _plain(obj):
    """ruamel containers → plain dicts/lists; dates → ISO strings; floats rounded for comparison."""
    if isinstance(obj, Mapping):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, (_dt.date, _dt.datetime)):
        return obj.isoformat()
    if isinstance(obj, bool) or obj is None or isinstance(obj, str):
        return obj if not isinstance(obj, str) else str(obj)
    if isinstance(obj, float):
        return round(float(obj), 12)
    if isinstance(obj, int):
        return int(obj)
    return obj


_TOP_KEY = re.compile(r"^([A-Za-z_][\w.-]*)\s*:", re.M)


def _blocks(text: str) -> tuple[str, dict[str, str]]:
    """(text before the first top-level key, {key: its block's text}), a block running from its
    key's line to the next top-level key (comments and blank lines in between included)."""
    starts = [(m.start(), m.group(1)) for m in _TOP_KEY.finditer(text)]
    head = text[: starts[0][0]] if starts else text
    ends = [s for s, _ in starts[1:]] + [len(text)]
    return head, {k: text[s:e] for (s, k), e in zip(starts, ends)}


def _keep_untouched_blocks(original: str, dumped: str) -> str:
    """``dumped`` with every top-level block whose data did not change replaced by the user's own
    text of it: ruamel keeps comments but re-flows multi-line flow mappings, and an edit should
    leave what it did not touch exactly as written."""
    head_o, old = _blocks(original)
    head_d, new = _blocks(dumped)
    if not old or [k for k in new if k in old] != [k for k in old if k in new]:
        return dumped  # keys reordered: keep ruamel's text

    def same(a: str, b: str) -> bool:
        try:
            return _plain(yaml.safe_load(a)) == _plain(yaml.safe_load(b))
        except yaml.YAMLError:
            return False

    out = [head_o if head_o.strip() == head_d.strip() else head_d]
    for key, block in new.items():
        kept = old.get(key)
        if kept is not None and same(kept, block):
            out.append(kept if kept.endswith("\n") else kept + "\n")
        else:
            out.append(block)
    return "".join(out)


def edited_text(path: str | Path, section: str | None, updates: Mapping[str, float], record: Mapping[str, Any],
                spec_cls, defaults: Mapping[str, float] | None = None) -> str:
    """New text of ``path`` with ``updates`` set and ``record`` as its ``calibration:`` block.

    ``defaults`` gives the documented default written into each fitted value's comment (else
    the one already in the comment, else the old value).

    Raises SpecError when the file is not a mapping, when the edited text does not read back
    as the intended data, or when the result is not a valid ``spec_cls``.
    """
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    path = Path(path)
    text = path.read_text(encoding="utf-8")
    data = _load(text, str(path))
    if not isinstance(data, Mapping):
        raise SpecError("expected a mapping at the top level", file=str(path))
    want = _plain(data)
    if section is not None and not isinstance(data.get(section), Mapping):
        data[section] = CommentedMap()
        want[section] = {}
    target = data if section is None else data[section]
    want_target = want if section is None else want[section]
    for name, value in updates.items():
        old = target.get(name)
        target[name] = float(value)
        want_target[name] = round(float(value), 12)
        _mark(target, name, old if old is not None else _field_default(spec_cls, section, name),
              (defaults or {}).get(name))
    rec = CommentedMap()
    for k, v in record.items():
        rec[k] = CommentedSeq(v) if isinstance(v, list) else v
    if target.fa.flow_style():
        rec.fa.set_flow_style()
        for v in rec.values():
            if isinstance(v, CommentedSeq):
                v.fa.set_flow_style()
    target["calibration"] = rec
    want_target["calibration"] = _plain(dict(record))
    buf = io.StringIO()
    _yaml().dump(data, buf)
    new = _keep_untouched_blocks(text, buf.getvalue())
    try:
        back = yaml.safe_load(new)
    except yaml.YAMLError as exc:
        raise SpecError(f"edit produced invalid YAML ({str(exc).splitlines()[0]}); file left unchanged",
                        file=str(path)) from None
    if _plain(back) != want:
        raise SpecError("edit did not reproduce the intended data; file left unchanged", file=str(path))
    from ..specs._base import validate_data

    validate_data(spec_cls, copy.deepcopy(back), file=str(path))
    return new


__all__ = ["edited_text", "documented_defaults"]
