"""Find and load profiles by ID or path.

A profile is named by an ID (the file stem of a bundled YAML) or by a path to a YAML file. User
folders given with ``--profiles-dir`` or the ``INFERSIM_PROFILES`` environment variable
(``os.pathsep``-separated) are searched before the bundled ones; each folder may hold
``hardware_profiles/``, ``model_profiles/`` and ``scenarios/`` subfolders or YAML files directly.
"""

from __future__ import annotations

import difflib
import os
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import TypeAdapter

from .. import files
from ..errors import SpecError
from ._base import Spec, load_spec, read_yaml, validate_data
from .hardware import HardwareSpec
from .model import ModelSpec
from .scenario import ScenarioFile as _ScenarioShim
from .scenario import ScenarioSpec, with_trace
from .workload_models import NonLlmModelFile, NonLlmScenarioSpec, is_non_llm_model, is_non_llm_scenario

Kind = Literal["hardware", "model", "scenario"]
KINDS: tuple[str, ...] = ("hardware", "model", "scenario")
FOLDERS = {"hardware": "hardware_profiles", "model": "model_profiles", "scenario": "scenarios", "preset": "presets"}
ENV_VAR = "INFERSIM_PROFILES"

_extra_dirs: list[Path] = []


def add_profile_dir(path: str | Path) -> None:
    """Search ``path`` (before the bundled profiles) for IDs."""
    p = Path(path)
    if not p.is_dir():
        raise SpecError("profiles folder does not exist" if not p.exists() else "is not a folder", file=str(p))
    _extra_dirs.insert(0, p)
    _index.cache_clear()


@lru_cache(maxsize=1)
def bundled_root() -> Path:
    """Folder holding the bundled profile folders (installed package data, or the source tree)."""
    here = Path(__file__).resolve().parent.parent
    installed = here / "profiles"
    if (installed / "hardware_profiles").is_dir():
        return installed
    return here.parent


def search_dirs(kind: str) -> list[Path]:
    """Folders searched for ``kind`` (user folders first, bundled last)."""
    return _search_dirs(kind)


def _search_dirs(kind: str) -> list[Path]:
    roots = list(_extra_dirs)
    roots += [Path(p) for p in os.environ.get(ENV_VAR, "").split(os.pathsep) if p]
    dirs = []
    for root in roots:
        sub = root / FOLDERS[kind]
        dirs.append(sub if sub.is_dir() else root)
    dirs.append(bundled_root() / FOLDERS[kind])
    return dirs


@lru_cache(maxsize=None)
def _index(kind: str, env: str) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for d in reversed(_search_dirs(kind)):  # earlier folders override later ones
        if d.is_dir():
            for f in sorted(d.glob("*.yaml")):
                found[f.stem] = f
    return found


def list_ids(kind: str) -> list[str]:
    """IDs of all profiles of ``kind`` visible on the search path."""
    return sorted(_index(kind, os.environ.get(ENV_VAR, "")))


def resolve(kind: str, name: str | Path) -> Path:
    """Path of the profile named ``name`` (an ID or a path to a YAML file)."""
    text = str(name)
    p = Path(text)
    if text.endswith((".yaml", ".yml")) or os.sep in text or "/" in text:
        return files.check_regular_file(p, what=f"{kind} profile", limit=files.MAX_YAML_BYTES)
    index = _index(kind, os.environ.get(ENV_VAR, ""))
    if text in index:  # a FIFO or folder named like a profile is refused here, never opened
        return files.check_regular_file(index[text], what=f"{kind} profile", limit=files.MAX_YAML_BYTES)
    close = difflib.get_close_matches(text, list(index), n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else f"; known: {', '.join(sorted(index))}"
    raise SpecError(f"unknown {kind} ID '{text}'{hint}")


_SCENARIO = TypeAdapter(ScenarioSpec)


def validate_kind(kind: str, data, file: str | None = None) -> Spec:
    """Validate parsed YAML as a spec of ``kind``."""
    if kind == "hardware":
        return validate_data(HardwareSpec, data, file=file)
    if kind == "model":
        if is_non_llm_model(data):  # diffusion / recommender profiles declare their kind
            return validate_data(NonLlmModelFile, data, file=file).root
        return validate_data(ModelSpec, data, file=file)
    if kind == "scenario":
        if is_non_llm_scenario(data):
            return validate_data(NonLlmScenarioSpec, data, file=file)
        return validate_data(_ScenarioShim, data, file=file).root
    raise SpecError(f"unknown profile kind '{kind}' (expected one of {', '.join(KINDS)})")


@lru_cache(maxsize=256)
def _load_cached(kind: str, path: str, mtime: float) -> Spec:
    spec = validate_kind(kind, read_yaml(Path(path)), file=path)
    if kind == "scenario" and not isinstance(spec, NonLlmScenarioSpec):
        spec = with_trace(spec, Path(path).parent)
    return spec


def load(kind: str, name: str | Path) -> Spec:
    """Load a profile of ``kind`` by ID or path (validated, frozen, cached by file mtime)."""
    path = resolve(kind, name)
    return _load_cached(kind, str(path), path.stat().st_mtime)


def load_hardware(name: str | Path) -> HardwareSpec:
    return load("hardware", name)  # type: ignore[return-value]


def load_model(name: str | Path) -> ModelSpec:
    return load("model", name)  # type: ignore[return-value]


def load_scenario(name: str | Path):
    return load("scenario", name)


def profile_id(kind: str, name: str | Path) -> str:
    """The ID (file stem) of a profile given by ID or path."""
    return resolve(kind, name).stem


def schema(kind: str) -> dict:
    """JSON Schema of a profile kind (for editors)."""
    from .docs import with_descriptions

    build = {"hardware": HardwareSpec.model_json_schema, "model": ModelSpec.model_json_schema,
             "scenario": _SCENARIO.json_schema}.get(kind)
    if build is not None:
        return with_descriptions(build(), Spec)
    raise SpecError(f"unknown profile kind '{kind}' (expected one of {', '.join(KINDS)})")


__all__ = ["load", "load_hardware", "load_model", "load_scenario", "resolve", "list_ids", "schema", "load_spec"]
