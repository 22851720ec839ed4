"""Lookup tables kept on disk between processes (the scheduler's busiest-rank tables).

The busiest-rank tables (``scheduler._busiest_table``, ``scheduler._capped_table``) cost
0.05-0.1 s each per ISL distribution × attention-DP degree and are rebuilt by every process,
including every forked worker of ``infersim validate``. ``persisted`` stores a table's arrays in
an ``.npz`` file named by a SHA-256 digest of everything the table depends on: the table's name,
its arguments (as exact float64 bytes), the source of the modules that compute it, and the numpy
and Python versions. A table read back is bit-identical to the one built; any change of an input
or of the code gives another name, so a stale file is never read.

Folder: ``$INFERSIM_CACHE_DIR`` (``off`` or empty: no disk cache), else
``$XDG_CACHE_HOME/infersim/tables`` (default ``~/.cache/infersim/tables``), with one subfolder per
code version (nothing prunes the subfolders of earlier versions; deleting the folder is always
safe). A table is 2-640 kB (``validate`` writes 31 of them, 7.7 MB). An unreadable, unwritable or corrupt
cache is ignored (the table is built as without it).
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

import numpy as np

ENV = "INFERSIM_CACHE_DIR"
SOURCES = ("scheduler.py", "serving.py", "table_cache.py")
"""Modules (in this package) whose code a persisted table depends on: part of its digest."""


def cache_dir() -> Path | None:
    """The tables' folder, or None when the disk cache is off."""
    value = os.environ.get(ENV)
    if value is not None:
        return None if value.strip().lower() in ("", "0", "off", "none") else Path(value)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "infersim" / "tables"


@lru_cache(maxsize=1)
def _code_digest() -> bytes:
    h = hashlib.sha256(f"numpy {np.__version__} python {sys.version}".encode())
    here = Path(__file__).resolve().parent
    for name in SOURCES:
        h.update(name.encode())
        h.update((here / name).read_bytes())
    return h.digest()


def digest(name: str, args: tuple) -> str:
    """Hex digest of a table's name, arguments (numbers as exact float64 bytes) and the code."""
    h = hashlib.sha256(_code_digest())
    h.update(name.encode())
    for a in args:
        arr = np.asarray(a, dtype=float)
        h.update(repr(arr.shape).encode())
        h.update(arr.tobytes())
    return h.hexdigest()


def _load(path: Path) -> tuple:
    with np.load(path, allow_pickle=False) as f:
        parts = [f[f"a{i}"] for i in range(int(f["n"]))]
    return tuple(float(p) if p.ndim == 0 else p for p in parts)


def persisted(name: str, build: Callable[..., tuple], *args) -> tuple:
    """``build(*args)`` (a tuple of float arrays and floats), read from the disk cache when a file
    with the same digest exists, else built and written there (atomically)."""
    folder = cache_dir()
    if folder is None:
        return build(*args)
    folder = folder / _code_digest().hex()[:16]  # one subfolder per code version: old ones can go
    path = folder / f"{name}-{digest(name, args)}.npz"
    try:
        if path.is_file():
            return _load(path)
    except (OSError, ValueError, KeyError, EOFError):
        pass  # corrupt or unreadable: build it again
    out = build(*args)
    import tempfile

    tmp = None
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            np.savez(f, n=len(out), **{f"a{i}": np.asarray(p, dtype=float) for i, p in enumerate(out)})
        os.replace(tmp, path)
    except OSError:
        if tmp is not None:  # no disk cache here: the table is still returned
            Path(tmp).unlink(missing_ok=True)
    return out
