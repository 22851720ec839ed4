"""Profile variants for the isolation benchmarks: put a previous fit's values back one at a time.

The isolation scripts (``wide_ep_isolation.py``, ``attention_dp_isolation.py``) take a hardware
profile and a round preset as they are now and as a commit had them (``git show``), build
variants that differ in one fitted value, write each into a scratch profiles folder and run
``infersim --profiles-dir FOLDER run ... --format json`` on it.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def value(text: str, key: str) -> str | None:
    """The number a YAML line ``key: <number>`` carries, or None when the key is absent."""
    m = re.search(rf"^\s*{key}:\s*([0-9.]+)", text, re.M)
    return m.group(1) if m else None


def with_value(text: str, key: str, v: str) -> str:
    """``text`` with ``key``'s number set to ``v`` (added under ``efficiency:`` when absent)."""
    if value(text, key) is None:
        return re.sub(r"^efficiency:\n", f"efficiency:\n  {key}: {v}\n", text, count=1, flags=re.M)
    return re.sub(rf"^(\s*{key}:\s*)([0-9.]+)", lambda m: m.group(1) + v, text, count=1, flags=re.M)


def now_and_then(paths: Sequence[str], commit: str) -> tuple[list[str], list[str]]:
    """The texts of ``paths`` (relative to the repository) in the working tree and at ``commit``."""
    now = [(ROOT / p).read_text() for p in paths]
    then = [subprocess.run(["git", "-C", str(ROOT), "show", f"{commit}:{p}"], capture_output=True, text=True,
                           check=True).stdout for p in paths]
    return now, then


def put_back(label: str, now: str, then: str, keys: Sequence[str], changed_only: bool = False
             ) -> list[tuple[str, str]]:
    """(name, text) per key: ``now`` with that one key's value from ``then``."""
    return [(f"{label} {k} {value(now, k)} -> {value(then, k)}", with_value(now, k, value(then, k)))
            for k in keys if not changed_only or value(now, k) != value(then, k)]


def scratch_folders(variants: Sequence[tuple[str, dict[str, str]]]) -> Iterator[tuple[str, Path]]:
    """(name, profiles folder) per variant; a variant maps repository-relative paths to texts."""
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, files) in enumerate(variants):
            folder = Path(tmp) / str(i)
            for rel, text in files.items():
                (folder / rel).parent.mkdir(parents=True, exist_ok=True)
                (folder / rel).write_text(text)
            yield name, folder


def run_json(folder: Path, argv: Sequence[str]) -> dict:
    """``infersim --profiles-dir folder run *argv`` (which must ask for ``--format json``), parsed."""
    out = subprocess.run([sys.executable, "-m", "infersim", "--profiles-dir", str(folder), "run", *argv],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)
