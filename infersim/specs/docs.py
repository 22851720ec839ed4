"""Attribute docstrings as JSON Schema descriptions, read only when a schema is asked for.

A spec documents each field with a string literal right below it. Having pydantic read them while
it builds the classes (``use_attribute_docstrings``) parses every spec module's source at import,
about a tenth of a second of every start, while only ``infersim schema`` shows them: this module
reads them on demand and writes each as its field's ``description``, as pydantic would have.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from functools import lru_cache

from pydantic import BaseModel


@lru_cache(maxsize=None)
def _own_docstrings(cls: type) -> dict[str, str]:
    """name → docstring of the annotated attributes written in ``cls``'s own body."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError, SyntaxError):  # no source (e.g. a class made at run time)
        return {}
    body = next((n.body for n in tree.body if isinstance(n, ast.ClassDef)), [])
    out = {}
    for node, after in zip(body, body[1:]):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)):
            out[node.target.id] = inspect.cleandoc(after.value.value)
    return out


def attribute_docstrings(cls: type[BaseModel]) -> dict[str, str]:
    """name → docstring of every attribute of ``cls``, a subclass's overriding its base's."""
    out: dict[str, str] = {}
    for base in reversed(cls.__mro__):
        if isinstance(base, type) and issubclass(base, BaseModel) and base is not BaseModel:
            out.update(_own_docstrings(base))
    return out


def _models(root: type[BaseModel]) -> dict[str, type[BaseModel]]:
    """Class name → model class of ``root`` and of every subclass of it."""
    out, todo = {}, [root]
    while todo:
        cls = todo.pop()
        out.setdefault(cls.__name__, cls)
        todo.extend(cls.__subclasses__())
    return out


def with_descriptions(schema: dict, root: type[BaseModel]) -> dict:
    """``schema`` (of ``root`` or a model holding subclasses of it) with each property that has no
    description given its attribute docstring, the schema's own definitions included."""
    models = _models(root)
    parts = [(schema.get("title"), schema)] + list(schema.get("$defs", {}).items())
    for name, part in parts:
        cls = models.get(name)
        props = part.get("properties")
        if cls is None or not props:
            continue
        docs = attribute_docstrings(cls)
        for field, info in cls.model_fields.items():
            key = info.alias or field
            doc = docs.get(field)
            if doc and key in props and "description" not in props[key]:
                # pydantic sorts a field schema's keys (GenerateJsonSchema.sort): so does this
                props[key] = dict(sorted({**props[key], "description": doc}.items()))
    return schema


__all__ = ["attribute_docstrings", "with_descriptions"]
