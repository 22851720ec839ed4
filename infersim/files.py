"""Safe file IO at the edges: bounded reads of regular files, safe YAML, one atomic writer and an
output guard.

Reading: only regular files are read (a FIFO, a device or a directory is refused with a clear
message instead of blocking or reading without end), and at most a size limit per kind of file.
The file is opened non-blocking and checked with ``fstat`` on the open descriptor, so what is
checked is what is read.

YAML: parsed with libyaml's safe C loader where PyYAML was built with it (``CSafeLoader``), else
the pure-Python ``SafeLoader``; both build only plain scalars, lists and mappings (no tags, no
objects). Aliases may make a small document stand for a huge tree; the tree is counted and
refused past ``MAX_YAML_NODES``.

Writing: ``write_atomic`` writes a temporary file in the target folder and renames it. Inside
``writing_as(command, ...)`` (the CLI wraps every command that writes) each write is also checked
by the output guard: a folder is refused; an existing file is replaced only when it is an
earlier output of the same command (a PNG/SVG that carries this command's stamp, or a text file
of the same shape: same CSV header, same JSON keys, same first table line, a calibrated YAML copy
with the same top-level keys) unless ``force``; nothing inside a protected folder (the bundled
profile folders) is written unless ``force``.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
import stat
import struct
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import yaml

from .errors import SpecError

MIB = 1 << 20
MAX_YAML_BYTES = 8 * MIB
"""Largest profile/preset YAML read; bundled profiles are under 20 KiB."""
MAX_TRACE_BYTES = 64 * MIB
"""Largest request trace CSV read (about 5 million rows of two lengths)."""
MAX_CSV_BYTES = 64 * MIB
"""Largest validation/calibration data CSV read."""
MAX_YAML_NODES = 2_000_000
"""Most scalars + containers a YAML document may expand to (aliases counted at each use)."""

YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's safe loader when available (about 20× faster), else the pure-Python safe loader."""


# ---- reading ---------------------------------------------------------------------------------
def _kind_of_mode(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def check_regular_file(path: str | os.PathLike, *, what: str = "file", limit: int | None = None) -> Path:
    """``path`` if it names an existing regular file (symlinks followed) of at most ``limit``
    bytes; else SpecError naming the file and what it is. Does not open the file."""
    p = Path(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise SpecError(f"no such file ({what})", file=str(p)) from None
    except (OSError, ValueError) as exc:
        raise SpecError(f"cannot read {what} ({getattr(exc, 'strerror', None) or exc})", file=str(p)) from None
    if not stat.S_ISREG(st.st_mode):
        raise SpecError(f"{what} is {_kind_of_mode(st.st_mode)}; expected a regular file", file=str(p))
    if limit is not None and st.st_size > limit:
        raise SpecError(f"{what} is {st.st_size / MIB:.1f} MiB; the limit is {limit / MIB:.0f} MiB", file=str(p))
    return p


def read_bytes(path: str | os.PathLike, *, what: str = "file", limit: int) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes (SpecError otherwise).

    Opened with O_NONBLOCK so that a FIFO never blocks the open; the type is checked on the
    open descriptor and the read stops after ``limit + 1`` bytes whatever the file claims.
    """
    p = Path(path)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(p, flags)
    except FileNotFoundError:
        raise SpecError(f"no such file ({what})", file=str(p)) from None
    except IsADirectoryError:
        raise SpecError(f"{what} is a directory; expected a regular file", file=str(p)) from None
    except (OSError, ValueError) as exc:
        raise SpecError(f"cannot read {what} ({getattr(exc, 'strerror', None) or exc})", file=str(p)) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise SpecError(f"{what} is {_kind_of_mode(st.st_mode)}; expected a regular file", file=str(p))
        if st.st_size > limit:
            raise SpecError(f"{what} is {st.st_size / MIB:.1f} MiB; the limit is {limit / MIB:.0f} MiB", file=str(p))
        chunks, total = [], 0
        while total <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > limit:
            raise SpecError(f"{what} grew past the limit of {limit / MIB:.0f} MiB while reading", file=str(p))
        return b"".join(chunks)
    except OSError as exc:
        raise SpecError(f"cannot read {what} ({exc.strerror or exc})", file=str(p)) from None
    finally:
        os.close(fd)


def read_text(path: str | os.PathLike, *, what: str = "file", limit: int, encoding: str = "utf-8") -> str:
    """``read_bytes`` decoded (SpecError on invalid UTF-8, naming the byte offset)."""
    raw = read_bytes(path, what=what, limit=limit)
    try:
        return raw.decode(encoding)
    except UnicodeDecodeError as exc:
        raise SpecError(f"not valid UTF-8 (byte {exc.start})", file=str(path)) from None


def parse_yaml(text: str, *, file: str | None = None) -> Any:
    """Safe-load one YAML document; every failure is a SpecError naming ``file``."""
    try:
        data = yaml.load(text, Loader=YAML_LOADER)  # noqa: S506 - a safe loader (C or Python)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SpecError(f"invalid YAML{where}: {problem}", file=file) from None
    except RecursionError:
        raise SpecError("YAML nested too deeply", file=file) from None
    except (ValueError, OverflowError, TypeError) as exc:  # scalar constructors: 2001-13-01, huge ints
        raise SpecError(f"invalid YAML value: {' '.join(str(exc).split())[:200]}", file=file) from None
    _check_size(data, file)
    return data


def _check_size(data: Any, file: str | None) -> None:
    """Refuse documents whose aliases expand past MAX_YAML_NODES (counted at each use)."""
    count, stack = 0, [data]
    while stack:
        node = stack.pop()
        count += 1
        if count > MAX_YAML_NODES:
            raise SpecError(f"YAML expands to more than {MAX_YAML_NODES:,} values (aliases?)", file=file)
        if isinstance(node, dict):
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


def read_yaml(path: str | os.PathLike, *, limit: int = MAX_YAML_BYTES) -> Any:
    """Read and safe-load a YAML file (regular file, at most ``limit`` bytes)."""
    return parse_yaml(read_text(path, what="YAML file", limit=limit), file=str(path))


# ---- writing ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class OutputPolicy:
    """What the command that is running may write (see ``writing_as``)."""

    command: str
    """The command's name, stamped into images and used to recognise its earlier outputs."""
    force: bool = False
    """Overwrite anything (the user said --force / --in-place)."""
    protected: tuple[Path, ...] = ()
    """Folders nothing is written into without ``force`` (resolved paths)."""


_POLICY: contextvars.ContextVar[OutputPolicy | None] = contextvars.ContextVar("infersim_output_policy", default=None)


@contextlib.contextmanager
def writing_as(command: str, *, force: bool = False, protected: tuple[str | os.PathLike, ...] = ()) -> Iterator[None]:
    """Check every ``write_atomic`` in this block with the output guard for ``command``."""
    prot = tuple(Path(p).resolve() for p in protected)
    token = _POLICY.set(OutputPolicy(command, force, prot))
    try:
        yield
    finally:
        _POLICY.reset(token)


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
STAMP_KEY = "infersim-output"
"""Key of the PNG tEXt chunk / SVG comment that names the command that wrote the image."""


def _stamp(payload: bytes, command: str) -> bytes:
    """``payload`` with a mark naming ``command`` (PNG: a tEXt chunk after IHDR; SVG: a comment)."""
    if payload.startswith(PNG_SIGNATURE) and payload[12:16] == b"IHDR":
        end = 8 + 8 + struct.unpack(">I", payload[8:12])[0] + 4
        body = b"tEXt" + STAMP_KEY.encode("latin-1") + b"\0" + command.encode("latin-1", "replace")
        chunk = struct.pack(">I", len(body) - 4) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)
        return payload[:end] + chunk + payload[end:]
    head = payload[:512].lstrip()
    if head.startswith(b"<?xml") and b"<svg" in payload[:4096]:
        close = payload.find(b"?>") + 2
        return payload[:close] + f"\n<!-- {STAMP_KEY}: {command} -->".encode() + payload[close:]
    return payload


def _stamped_by(existing: bytes, command: str) -> bool:
    png = STAMP_KEY.encode() + b"\0" + command.encode("latin-1", "replace")
    svg = f"<!-- {STAMP_KEY}: {command} -->".encode()
    return (existing.startswith(PNG_SIGNATURE) and png in existing[:4096]) or svg in existing[:4096]


def _same_shape(existing: bytes, new: bytes) -> bool:
    """True when ``existing`` looks like an earlier version of the text output ``new``."""
    try:
        old_text, new_text = existing.decode("utf-8"), new.decode("utf-8")
    except UnicodeDecodeError:
        return False
    if not old_text.strip() or not new_text.strip():
        return False
    try:
        old_obj, new_obj = json.loads(old_text), json.loads(new_text)
    except ValueError:
        pass
    else:
        return _json_keys(old_obj) is not None and _json_keys(old_obj) == _json_keys(new_obj)
    try:
        old_yaml = yaml.load(old_text, Loader=YAML_LOADER)  # noqa: S506
        new_yaml = yaml.load(new_text, Loader=YAML_LOADER)  # noqa: S506
    except yaml.YAMLError:
        old_yaml = new_yaml = None
    if isinstance(new_yaml, dict) and len(new_yaml) > 1:
        # a calibrated profile or preset: same fields and a calibration record already present
        return isinstance(old_yaml, dict) and set(old_yaml) == set(new_yaml) and _has_key(old_yaml, "calibration")
    first = lambda t: t.lstrip("\n").split("\n", 1)[0].strip()  # noqa: E731 - CSV header / table title
    return first(old_text) == first(new_text)


def _json_keys(obj: Any) -> tuple | None:
    if isinstance(obj, dict):
        return ("dict", tuple(sorted(obj)))
    if isinstance(obj, list) and obj and isinstance(obj[0], dict):
        return ("list", tuple(sorted(obj[0])))
    return None


def _has_key(obj: Any, key: str) -> bool:
    if isinstance(obj, dict):
        return key in obj or any(_has_key(v, key) for v in obj.values())
    return False


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def guard_output(path: Path, payload: bytes | None, policy: OutputPolicy, *, image: bool = False) -> None:
    """Raise SpecError when ``policy`` does not allow writing ``payload`` to ``path``.

    ``payload`` None checks only what can be known before the output exists: the place, and for
    an ``image`` output that an existing file carries this command's stamp.
    """
    if path.is_dir():
        raise SpecError("is a directory; expected a file name for the output", file=str(path))
    resolved = path.resolve()
    if policy.force:
        return
    for folder in policy.protected:
        if _inside(resolved, folder):
            raise SpecError(f"refusing to write inside the bundled profiles ({folder}); choose another path "
                            "or pass --force", file=str(path))
    if not os.path.lexists(path):
        return
    if not path.is_file():
        raise SpecError("exists and is not a regular file; refusing to replace it", file=str(path))
    try:
        with open(path, "rb") as f:
            existing = f.read(MAX_CSV_BYTES + 1)
    except OSError as exc:
        raise SpecError(f"cannot read the existing file ({exc.strerror or exc})", file=str(path)) from None
    stamped = _stamped_by(existing, policy.command)
    if payload is None:
        ok = stamped or not image
    else:
        ok = stamped or (not existing.startswith(PNG_SIGNATURE) and _same_shape(existing, payload))
    if not ok:
        raise SpecError(f"exists and is not an earlier output of 'infersim {policy.command}'; refusing to overwrite "
                        "it (pass --force to replace it)", file=str(path))


def check_output_path(path: str | os.PathLike, *, flag: str, suffixes: tuple[str, ...], image: bool = False) -> Path:
    """Check an output path before any work: a known suffix (case-insensitive), not a folder,
    a name the file system accepts, and (inside ``writing_as``) the guard's checks that need no
    content (the place; for an ``image``, that an existing file is this command's)."""
    p = Path(path)
    if "\0" in str(path):
        raise SpecError(f"{flag}: a file name cannot contain a NUL byte")
    if str(path) == "" or p.name in ("", ".", ".."):
        raise SpecError(f"{flag} needs a file name", file=str(path))
    if len(os.fsencode(p.name)) > 255:
        raise SpecError(f"{flag}: file name longer than 255 bytes", file=str(path)[:80] + "…")
    if p.is_dir():
        raise SpecError(f"{flag} is a directory; expected a file name", file=str(path))
    if p.suffix.lower() not in suffixes:
        raise SpecError(f"{flag} must end in {' or '.join(suffixes)} (got '{p.suffix or p.name}')", file=str(path))
    policy = _POLICY.get()
    if policy is not None:
        guard_output(p, None, policy, image=image)
    return p


def write_atomic(path: str | os.PathLike, data: str | bytes) -> Path:
    """Write a file atomically (temporary file in the same folder, then rename).

    An existing file keeps its permissions; a new one gets the usual ones (0666 minus the umask).
    Inside ``writing_as`` the output guard runs first and images get the command's stamp.
    File-system failures (no permission, name too long, disk full) are SpecErrors naming the file.
    """
    path = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    policy = _POLICY.get()
    if policy is not None:
        guard_output(path, payload, policy)
        payload = _stamp(payload, policy.command)
    elif path.is_dir():
        raise SpecError("is a directory; expected a file name for the output", file=str(path))
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name[:200]}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
        if path.exists():
            mode = path.stat().st_mode & 0o777
        else:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.chmod(tmp, mode)  # mkstemp creates 0600
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        raise SpecError(f"cannot write the file ({exc.strerror or exc})", file=str(path)) from None
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
    return path


__all__ = ["read_bytes", "read_text", "read_yaml", "parse_yaml", "check_regular_file", "write_atomic",
           "writing_as", "check_output_path", "guard_output", "YAML_LOADER"]
