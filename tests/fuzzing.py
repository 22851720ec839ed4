"""CLI fuzzing shared by tests/test_fuzz_cli.py and benchmarks/fuzz.py.

``Workspace`` builds a scratch folder: a copy of the bundled profile folders (the CLI is pointed
at it, so even a broken output guard cannot damage the source tree), fixed odd inputs (a FIFO, a
folder named like a profile, a non-UTF-8 file, a file over the YAML size limit, an alias bomb, a
symlink to /dev/zero) and user files in an output folder that must never be overwritten.
``argvs`` draws a command line: mostly valid IDs and flags with odd values mixed in, mutated
profile YAML, traces and data CSVs written per example. ``Workspace.run`` invokes the CLI in
process with a per-example timeout and returns an ``Outcome``: exit code, hang, traceback,
non-finite or negative JSON numbers, and any input file that changed.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import signal
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from hypothesis import strategies as st
import typer.testing
from typer.testing import CliRunner

REPO = Path(__file__).resolve().parent.parent
BUNDLED = ("hardware_profiles", "model_profiles", "scenarios", "presets", "data")

HARDWARE = ("h100-sxm", "l40s", "a100-sxm", "mi300x", "b200", "gb300-nvl72", "tpu-v6e", "gaudi3")
MODELS = ("llama3.1-8b", "qwen3-32b", "mixtral-8x7b", "gpt-oss-20b", "llama2-70b", "deepseek-r1")
SCENARIOS = ("chat-1k-1k", "batch-1k-1k", "reasoning-1k-8k", "rag-8k-1k", "chat-trace", "mlperf-llama3.1-8b-server",
             "mlperf-llama3.1-8b-offline", "mlperf-mixtral-8x7b-server", "mlperf-deepseek-r1-interactive",
             "mlperf-llama2-70b-offline")
OPTS = ("fusion", "overlap", "attention_dp", "mtp", "wide_ep", "disagg", "kv_routing")
ROUNDS = ("v4.0", "v4.1", "v5.0", "v5.1", "v6.0", "latest")

ODD_NUMBERS = ("0", "-1", "-0", "1e400", "-1e400", "nan", "inf", "-inf", "2.5", "0.5", "abc", "", " ", "1e6",
               "1000001", "99999999999999999999", "1_000", "0x10", "true", "3 ", "\u0663", "1e-300", "--tp")
GOOD_COUNTS = ("1", "2", "4", "8", "16", "72")
YAML_VALUES = ("5", True, False, -1, 0, float("nan"), float("inf"), -float("inf"), 1e308, 10**30, [1], {"a": 1}, None,
               "", 2.5, 7, "2026-13-45", "x" * 300)
SET_VALUES = ("[", "]", "{", "3", "0", "-1", "2.5", "1e400", ".nan", ".inf", "true", "yes", "null", "[0.9, 0.8]",
              "[0.9, 2]", "[]", "{a: 1}", "!!python/object:os.system ls", "'3'", "0.3", "9", "1e12", "&a [*a]")
BILLION_LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [{', '.join([f'*{p}'] * 10)}]\n" for p, c in zip("abcdefgh", "bcdefghi"))


KNOWN_BUGS = {
}
"""Internal errors already reported to the owner of the module (where → what). The fuzz counts
them apart; tests/test_fuzz_cli.py pins each with a strict xfail so that the entry goes when fixed."""


def _origin(exc_info) -> str:
    """``infersim/module.py:function`` of the innermost frame inside the infersim package."""
    import traceback

    where = "?"
    if exc_info and exc_info[2] is not None:
        for frame in traceback.extract_tb(exc_info[2]):
            path = Path(frame.filename)
            if "infersim" in path.parts and "tests" not in path.parts:
                i = len(path.parts) - 1 - path.parts[::-1].index("infersim")
                where = "/".join(path.parts[i:]) + ":" + frame.name
    return where


class Hang(BaseException):
    """Raised by the per-example alarm (a BaseException so no `except Exception` swallows it)."""


@dataclass
class Outcome:
    argv: list[str]
    code: int | None
    """Exit code; None for a hang."""
    output: str = ""
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)
    """What is wrong: internal error, traceback, bad JSON number, changed input."""
    where: str = ""
    """For an internal error: the innermost infersim frame, ``path:function``."""

    @property
    def known_bug(self) -> str | None:
        """The KNOWN_BUGS entry this outcome's internal error matches, if any."""
        return next((k for k in KNOWN_BUGS if self.where.startswith(k)), None) if self.where else None

    @property
    def hang(self) -> bool:
        return self.code is None


def _stat_key(p: Path):
    st = os.lstat(p)
    return st.st_size, st.st_mtime_ns, st.st_ino, st.st_mode


def bad_json_numbers(obj: Any, path: str = "") -> list[str]:
    """Paths of numbers that are not finite or are negative (signed errors excepted)."""
    out = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += bad_json_numbers(v, f"{path}.{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += bad_json_numbers(v, f"{path}[{i}]")
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
        key = path.rsplit(".", 1)[-1]
        signed = key == "error_pct" or "signed" in key  # signed errors are negative by design
        if not math.isfinite(obj) or (obj < 0 and not signed):
            out.append(f"{path}={obj}")
    return out


class Workspace:
    """A scratch folder with a copy of the bundled profiles, fixed odd inputs and user files."""

    def __init__(self, root: str | Path | None = None, timeout_s: float = 20.0):
        self.root = Path(root or tempfile.mkdtemp(prefix="infersim-fuzz-"))
        self.timeout_s = timeout_s
        self.bundle = self.root / "bundle"
        self.inputs = self.root / "inputs"
        self.out = self.root / "out"
        self.gen = self.root / "gen"
        for d in (self.inputs, self.out, self.gen):
            d.mkdir(parents=True, exist_ok=True)
        for name in BUNDLED:
            if not (self.bundle / name).exists():
                shutil.copytree(REPO / name, self.bundle / name)
        self._fixed_inputs()
        self.runner = CliRunner()
        self._n = 0
        self._patches: list = []

    def _fixed_inputs(self) -> None:
        i = self.inputs
        fifo = i / "fifo.yaml"
        if not fifo.exists():
            os.mkfifo(fifo)
        (i / "folder.yaml").mkdir(exist_ok=True)
        (i / "binary.yaml").write_bytes(b"\xff\xfe\x00bad")
        (i / "empty.yaml").write_bytes(b"")
        (i / "list.yaml").write_text("- a\n- b\n")
        (i / "bomb.yaml").write_text(BILLION_LAUGHS)
        (i / "deep.yaml").write_text("a: " + "[" * 5000 + "]" * 5000 + "\n")
        big = i / "big.yaml"
        if not big.exists():
            big.write_text("notes:\n" + "  - padding line to pass the size limit\n" * 240_000)  # ~9.4 MB
        zero = i / "zero.csv"
        if not zero.exists():
            zero.symlink_to("/dev/zero")
        (i / "trace-ok.csv").write_text("isl,osl\n100,200\n3000,50\n")
        (i / "data-ok.csv").write_text(self._data_header() + "\n" + self._data_rows()[0] + "\n")
        self._restore_user_files()
        (self.out / "a-folder.png").mkdir(exist_ok=True)

    USER_FILES = {"notes.txt": b"my own notes\n", "user.csv": b"a,b\n1,2\n", "user.json": b'{"mine": 1}\n',
                  "user.png": b"\x89PNG\r\n\x1a\nnot really"}
    """Files of the user in the output folder: only --force may replace them."""

    def _restore_user_files(self) -> None:
        """Put the user's files back (after an example that replaced one with --force)."""
        for name, content in self.USER_FILES.items():
            p = self.out / name
            if not p.is_file() or p.is_symlink() or p.read_bytes() != content:
                if p.is_dir():
                    shutil.rmtree(p)
                p.write_bytes(content)

    @staticmethod
    def _data_header() -> str:
        return (REPO / "data" / "mlperf_llm_results.csv").read_text(encoding="utf-8").splitlines()[0]

    @staticmethod
    def _data_rows() -> list[str]:
        lines = (REPO / "data" / "mlperf_llm_results.csv").read_text(encoding="utf-8").splitlines()[1:]
        cheap = [ln for ln in lines if ",llama3.1-8b," in ln or ",llama2-70b," in ln or ",mixtral-8x7b," in ln]
        return cheap[:40]

    # ---- the CLI's view of the bundled folders -----------------------------------------------
    def __enter__(self) -> "Workspace":
        from infersim.optimizations import presets
        from infersim.specs import catalog

        root = self.bundle
        self._patches.append((typer.testing, "_get_command", typer.testing._get_command))
        typer.testing._get_command = _cached_get_command(typer.testing._get_command)
        for mod in (catalog, presets):
            self._patches.append((mod, "bundled_root", mod.bundled_root))
            mod.bundled_root = lambda: root
        self._patches.append((os.environ, "INFERSIM_PROFILES", os.environ.get("INFERSIM_PROFILES")))
        os.environ["INFERSIM_PROFILES"] = ""
        # internal errors propagate (instead of exit 3) so that the fuzz can name where they arise
        self._patches.append((os.environ, "INFERSIM_DEBUG", os.environ.get("INFERSIM_DEBUG")))
        os.environ["INFERSIM_DEBUG"] = "1"
        catalog._index.cache_clear()
        if hasattr(presets, "_preset_files") and hasattr(presets._preset_files, "cache_clear"):
            presets._preset_files.cache_clear()
        return self

    def __exit__(self, *exc) -> None:
        from infersim.specs import catalog

        for target, name, old in reversed(self._patches):
            if target is os.environ:
                if old is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = old
            else:
                setattr(target, name, old)
        self._patches.clear()
        catalog._index.cache_clear()

    def protected_files(self) -> list[Path]:
        """Files that no command may change: the bundle copy, fixed inputs, user files."""
        if getattr(self, "_protected", None) is None:
            self._protected = self._walk_protected()
        return self._protected

    def _walk_protected(self) -> list[Path]:
        out = []
        for top in (self.bundle, self.inputs):
            for dirpath, _, names in os.walk(top):
                out += [Path(dirpath) / n for n in names]
        out += [self.out / n for n in ("notes.txt", "user.csv", "user.json", "user.png")]
        return out

    # ---- generated per-example inputs ----------------------------------------------------------
    def new_file(self, suffix: str, content: str | bytes) -> str:
        self._n += 1
        p = self.gen / f"g{self._n}{suffix}"
        if isinstance(content, str):
            content = content.encode("utf-8", "surrogatepass")
        p.write_bytes(content)
        return str(p)

    def run(self, argv: list[str]) -> Outcome:
        """Invoke the CLI on ``argv`` with the timeout and check every property of the outcome."""
        import time

        from infersim.specs import catalog

        guarded = self.protected_files() + sorted(self.gen.iterdir())
        before = {p: _stat_key(p) for p in guarded}
        gen_bytes = {p: p.read_bytes() for p in guarded if p.parent == self.gen and p.is_file()}
        old = signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, self.timeout_s)
        t0 = time.perf_counter()
        try:
            res = self.runner.invoke(_app(), argv, catch_exceptions=True)
        except Hang:
            self._reset()  # an interrupted command may have left files behind: the next example starts clean
            return Outcome(argv, None, "", time.perf_counter() - t0, [f"hang (> {self.timeout_s:g} s)"])
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
            catalog._extra_dirs.clear()  # --profiles-dir is per process in real use
            catalog._index.cache_clear()
        dt = time.perf_counter() - t0
        output = (res.stdout or "") + (res.stderr or "")
        o = Outcome(argv, res.exit_code, output, dt)
        if res.exception is not None and not isinstance(res.exception, SystemExit):
            o.code = 3
            o.where = _origin(res.exc_info)
            o.problems.append(f"internal error {type(res.exception).__name__} at {o.where}: "
                              f"{' '.join(str(res.exception).split())[:200]}")
        elif o.code not in (0, 1, 2):
            o.problems.append(f"exit {o.code}: {(res.stderr or '').strip()[:300]}")
        if "Traceback" in output:
            o.problems.append("traceback in output")
        if (res.stderr or "").startswith(("error:", "infeasible:")) and len(res.stderr.splitlines()) != 1:
            o.problems.append("error message longer than one line")
        if o.code == 0 and (res.stdout or "").strip() and argv[argv.index("--format") + 1:][:1] == ["json"] \
                if "--format" in argv else False:
            try:
                doc = json.loads(res.stdout)
            except ValueError as exc:
                o.problems.append(f"--format json printed invalid JSON ({exc})")
            else:
                bad = bad_json_numbers(doc)
                if bad:
                    o.problems.append(f"non-finite or negative numbers in JSON: {bad[:5]}")
        forced = {Path(argv[i + 1]) for i, a in enumerate(argv[:-1]) if a in ("--out", "--plot")} \
            if "--force" in argv else set()
        for p, key in before.items():
            if p in forced:
                continue  # the user asked for this file to be replaced
            try:
                now = _stat_key(p)
            except FileNotFoundError:
                now = None
            if now != key or (p in gen_bytes and p.read_bytes() != gen_bytes[p]):
                o.problems.append(f"input changed: {p}")
        self._reset(forced)
        return o

    def _reset(self, forced: set[Path] = frozenset()) -> None:
        """The user's files back, the generated inputs removed, and a fixed input that a command
        replaced with --force (as asked) rebuilt: otherwise it would now be that command's earlier
        output, which a later example may replace without --force, and that example would see an
        input change it did not make."""
        self._restore_user_files()
        replaced = [p for p in forced if p.resolve().parent == self.inputs.resolve()]
        for p in replaced:
            if p.is_file() or p.is_symlink():
                p.unlink()
        if replaced:
            self._fixed_inputs()
        for p in list(self.gen.iterdir()):
            if p.is_file() or p.is_symlink():
                p.unlink()
            else:
                shutil.rmtree(p)


def _alarm(signum, frame):
    raise Hang()


def _app():
    from infersim.cli import app

    return app


def _cached_get_command(original):
    """typer's get_command, memoised per app (typer rebuilds the click command on every invoke,
    ~10 ms; the fuzz run invokes thousands of times)."""
    built: dict[int, Any] = {}

    def get_command(app):
        if id(app) not in built:
            built[id(app)] = (app, original(app))
        return built[id(app)][1]

    return get_command


# ---- strategies ------------------------------------------------------------------------------
def _leaves(obj: Any, prefix: tuple = ()) -> list[tuple]:
    out = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.append(prefix + (k,))
            out += _leaves(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj[:3]):
            out.append(prefix + (i,))
            out += _leaves(v, prefix + (i,))
    return out


def _set_path(obj: Any, path: tuple, value: Any, op: str) -> None:
    node = obj
    for part in path[:-1]:
        node = node[part]
    last = path[-1]
    if op == "delete" and isinstance(node, dict):
        del node[last]
    elif op == "extra" and isinstance(node, dict):
        node["unknown_field"] = value
    else:
        node[last] = value


_PROFILE_CACHE: dict[str, Any] = {}


def _profile_data(folder: str, pid: str) -> Any:
    key = f"{folder}/{pid}"
    if key not in _PROFILE_CACHE:
        _PROFILE_CACHE[key] = yaml.safe_load((REPO / folder / f"{pid}.yaml").read_text(encoding="utf-8"))
    return _PROFILE_CACHE[key]


@st.composite
def mutated_profile(draw, ws: Workspace, folder: str, ids: tuple[str, ...]) -> str:
    """A bundled profile with one field replaced, deleted or an extra one added; or raw damage."""
    import copy

    pid = draw(st.sampled_from(ids))
    text = (REPO / folder / f"{pid}.yaml").read_text(encoding="utf-8")
    how = draw(st.sampled_from(("field", "field", "field", "truncate", "bytes")))
    if how == "truncate":
        cut = draw(st.integers(0, len(text)))
        return ws.new_file(".yaml", text[:cut])
    if how == "bytes":
        at = draw(st.integers(0, len(text)))
        junk = draw(st.sampled_from(("\t", ": :", "\x00", "&x", "*nope", "{", "- ", "!!binary x", "%YAML 9")))
        return ws.new_file(".yaml", text[:at] + junk + text[at:])
    data = copy.deepcopy(_profile_data(folder, pid))
    paths = _leaves(data)
    path = draw(st.sampled_from(paths))
    op = draw(st.sampled_from(("replace", "replace", "replace", "delete", "extra")))
    value = draw(st.sampled_from(YAML_VALUES))
    _set_path(data, path, value, op)
    return ws.new_file(".yaml", yaml.safe_dump(data, sort_keys=False))


@st.composite
def profile_arg(draw, ws: Workspace, folder: str, ids: tuple[str, ...]) -> str:
    choice = draw(st.integers(0, 19))
    if choice < 13:
        return draw(st.sampled_from(ids))
    if choice < 16:
        return draw(mutated_profile(ws, folder, ids))
    odd = ["fifo.yaml", "folder.yaml", "binary.yaml", "empty.yaml", "list.yaml", "bomb.yaml", "deep.yaml", "big.yaml",
           "absent.yaml", "zero.csv"]
    return draw(st.sampled_from([str(ws.inputs / n) for n in odd] + ["h100", "", "../../etc/passwd", "x" * 300,
                                                                     "/dev/zero", "/"]))


def number(good: tuple[str, ...]) -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(good), st.sampled_from(good), st.sampled_from(ODD_NUMBERS))


@st.composite
def trace_file(draw, ws: Workspace) -> str:
    choice = draw(st.integers(0, 9))
    if choice == 0:
        return str(ws.inputs / draw(st.sampled_from(("fifo.yaml", "folder.yaml", "zero.csv", "binary.yaml", "absent"))))
    if choice == 1:
        return str(ws.inputs / "trace-ok.csv")
    if choice == 2:  # arrival times and shared prefixes, good or broken
        t = draw(st.lists(st.one_of(st.floats(0, 1e6).map(repr), st.sampled_from(("-1", "nan", "", "1e13", "x"))),
                          min_size=1, max_size=5))
        pid = draw(st.lists(st.sampled_from(("a", "b", "", "a")), min_size=len(t), max_size=len(t)))
        pt = draw(st.lists(st.sampled_from(("0", "50", "100", "5000", "-1", "1.5")), min_size=len(t), max_size=len(t)))
        return ws.new_file(".csv", "isl,osl,arrival_s,prefix_id,prefix_tokens\n"
                           + "".join(f"100,20,{a},{b},{c}\n" for a, b, c in zip(t, pid, pt)))
    header = draw(st.sampled_from(("isl,osl", "isl,osl", "osl,isl,extra", "isl", "", "\ufeffisl,osl")))
    cell = st.one_of(st.integers(1, 20000).map(str), st.sampled_from(("nan", "-5", "0", "", "abc", "1e8", "inf",
                                                                        "1e400", '"3', "x" * 200_000)))
    rows = draw(st.lists(st.tuples(cell, cell), min_size=0, max_size=4))
    return ws.new_file(".csv", header + "\n" + "".join(f"{a},{b}\n" for a, b in rows))


@st.composite
def data_csv(draw, ws: Workspace, always_bad: bool = False) -> str:
    if not always_bad and draw(st.integers(0, 3)) == 0:
        return str(ws.inputs / "data-ok.csv")
    choice = draw(st.integers(0, 5))
    if choice == 0:
        return str(ws.inputs / draw(st.sampled_from(("fifo.yaml", "folder.yaml", "zero.csv", "binary.yaml", "absent"))))
    header = ws._data_header()
    rows = draw(st.lists(st.sampled_from(ws._data_rows()), min_size=1, max_size=2))
    cols = header.split(",")
    if always_bad or choice < 5:
        i = draw(st.integers(0, len(rows) - 1))
        cells = rows[i].split(",")
        col = draw(st.sampled_from(("version", "hardware", "model", "scenario", "accelerators", "tokens_per_s")))
        cells[cols.index(col)] = draw(st.sampled_from(("nan", "inf", "-1", "0", "", "abc", "1e400", "2.5", "v9.9",
                                                       "h100", "1e-300", "1e300")))
        if always_bad and col in ("version", "hardware", "model", "scenario"):
            cells[cols.index("accelerators")] = "nan"  # calibrate must fail before fitting
        rows[i] = ",".join(cells)
    return ws.new_file(".csv", header + "\n" + "\n".join(rows) + "\n")


@st.composite
def out_path(draw, ws: Workspace, suffixes: tuple[str, ...]) -> str:
    choice = draw(st.integers(0, 9))
    if choice < 4:
        self_suffix = draw(st.sampled_from(suffixes + (".jpg", ".yaml", "", ".CSV")))
        return str(ws.out / f"new{draw(st.integers(0, 5))}{self_suffix}")
    if choice < 6:
        return str(ws.out / draw(st.sampled_from(("notes.txt", "user.csv", "user.json", "user.png", "a-folder.png"))))
    if choice == 6:
        return str(ws.bundle / draw(st.sampled_from(("hardware_profiles/h100-sxm.yaml", "hardware_profiles/new.csv",
                                                     "presets/v6.0.yaml", "data/mlperf_llm_results.csv",
                                                     "model_profiles/x.png"))))
    if choice == 7:
        return str(ws.inputs / draw(st.sampled_from(("trace-ok.csv", "fifo.yaml", "folder.yaml", "data-ok.csv"))))
    return draw(st.sampled_from((str(ws.out), str(ws.out / ("y" * 300 + ".png")), str(ws.out / "deep/er/x.csv"),
                                 "/dev/null", ".", "", str(ws.out / "x.json"), str(ws.out / "x.txt"))))


@st.composite
def set_items(draw) -> list[str]:
    from infersim import optimizations as opt

    items = []
    for _ in range(draw(st.integers(0, 2))):
        kind = draw(st.sampled_from(OPTS + ("nope",)))
        fields = list(opt.REGISTRY[kind].model_fields) if kind in opt.REGISTRY else ["x"]
        param = draw(st.sampled_from(fields + ["bogus"]))
        value = draw(st.one_of(st.sampled_from(SET_VALUES), st.text(max_size=8).filter(lambda t: "\x00" not in t)))
        form = draw(st.sampled_from(("{k}.{p}={v}", "{k}.{p}={v}", "{k}={v}", "{k}.{p}", ".{p}={v}")))
        items += ["--set", form.format(k=kind, p=param, v=value)]
    return items


def _opt(draw, flag: str, strategy, p_absent: int = 3) -> list[str]:
    """``[flag, value]`` with probability 1/p_absent, else nothing."""
    if draw(st.integers(0, p_absent - 1)) != 0:
        return []
    return [flag, draw(strategy)]


@st.composite
def system_args(draw, ws: Workspace) -> list[str]:
    argv = ["--hardware", draw(profile_arg(ws, "hardware_profiles", HARDWARE)),
            "--scenario", draw(profile_arg(ws, "scenarios", SCENARIOS))]
    if draw(st.integers(0, 2)):
        argv += ["--model", draw(profile_arg(ws, "model_profiles", MODELS))]
    argv += _opt(draw, "--accelerators", number(GOOD_COUNTS), 4)
    argv += _opt(draw, "--round", st.sampled_from(ROUNDS + ("v9.9", "x", "", "v3.0")), 4)
    for flag in ("--enable", "--disable"):
        argv += _opt(draw, flag, st.sampled_from(OPTS + ("nope", "")), 5)
    argv += draw(limit_flags())
    return argv


@st.composite
def limit_flags(draw) -> list[str]:
    """Latency-limit overrides, now and then (odd values among them)."""
    argv = _opt(draw, "--tpot-ms", number(("20", "50", "200")), 6)
    argv += _opt(draw, "--ttft-ms", number(("300", "2000")), 8)
    argv += _opt(draw, "--slo-percentile", number(("90", "99", "99.9")), 10)
    argv += _opt(draw, "--e2e-ms", number(("10000",)), 12)
    return argv


@st.composite
def clean_run_argv(draw) -> list[str]:
    """A run with bundled IDs and in-range flags only (most succeed or are infeasible)."""
    argv = ["run", "--hardware", draw(st.sampled_from(HARDWARE)), "--scenario", draw(st.sampled_from(SCENARIOS))]
    if draw(st.booleans()):
        argv += ["--model", draw(st.sampled_from(MODELS))]
    argv += _opt(draw, "--accelerators", st.sampled_from(GOOD_COUNTS), 3)
    argv += _opt(draw, "--round", st.sampled_from(ROUNDS), 3)
    argv += _opt(draw, "--enable", st.sampled_from(OPTS), 4)
    argv += _opt(draw, "--disable", st.sampled_from(OPTS), 4)
    argv += _opt(draw, "--tp", st.sampled_from(GOOD_COUNTS[:4]), 4)
    argv += _opt(draw, "--batch", st.sampled_from(("1", "8", "64", "256")), 3)
    argv += _opt(draw, "--isl", st.sampled_from(("128", "1000", "2000")), 5)
    argv += _opt(draw, "--price-per-hour", st.sampled_from(("0", "1.5", "30")), 5)
    argv += _opt(draw, "--qps", st.sampled_from(("1", "20")), 6)
    argv += _opt(draw, "--set", st.sampled_from(("mtp.depth=1", "mtp.depth=2", "overlap.hidden_fraction=0.5",
                                                 "disagg.kv_transfer_exposed=0", "mtp.acceptance=[0.9, 0.5]")), 4)
    argv += _opt(draw, "--tpot-ms", st.sampled_from(("20", "50", "200")), 6)
    return argv + ["--format", "json"]


@st.composite
def run_argv(draw, ws: Workspace) -> list[str]:
    if draw(st.integers(0, 2)) == 0:
        return draw(clean_run_argv())
    argv = ["run", *draw(system_args(ws))]
    for flag in ("--tp", "--ep", "--dp", "--pp"):
        argv += _opt(draw, flag, number(GOOD_COUNTS), 3)
    argv += _opt(draw, "--batch", number(("1", "8", "64", "256")), 3)
    argv += _opt(draw, "--isl", number(("128", "1000", "4000")), 5)
    argv += _opt(draw, "--osl", number(("128", "1000")), 5)
    argv += _opt(draw, "--price-per-hour", number(("0", "1.5", "3")), 5)
    argv += _opt(draw, "--qps", number(("1", "10", "100")), 6)
    if draw(st.integers(0, 7)) == 0:
        argv += ["--tco-capex", draw(number(("25000", "1"))), "--tco-years", draw(number(("4", "1"))),
                 "--tco-pue", draw(number(("1.3", "1"))), "--tco-usd-per-kwh", draw(number(("0.1", "0")))]
    if draw(st.integers(0, 5)) == 0:
        argv += ["--trace", draw(trace_file(ws))]
    argv += draw(set_items())
    argv += ["--format", draw(st.sampled_from(("json", "json", "table", "yaml")))]
    if draw(st.integers(0, 4)) == 0:
        argv.append("--explain")
    return argv


@st.composite
def pareto_argv(draw, ws: Workspace) -> list[str]:
    argv = ["pareto", *draw(system_args(ws)), "--format", draw(st.sampled_from(("json", "csv", "table")))]
    argv += _opt(draw, "--out", out_path(ws, (".csv", ".json")), 2)
    if draw(st.integers(0, 5)) == 0:
        argv += ["--plot", draw(out_path(ws, (".png",)))]
    if draw(st.integers(0, 5)) == 0:
        argv.append("--force")
    return argv


@st.composite
def ablate_argv(draw, ws: Workspace) -> list[str]:
    hw = draw(st.sampled_from(("h100-sxm", "l40s", draw(profile_arg(ws, "hardware_profiles", HARDWARE)))))
    argv = ["ablate", "--hardware", hw, "--scenario", draw(st.sampled_from(("chat-1k-1k", "batch-1k-1k"))),
            "--model", draw(st.sampled_from(("llama3.1-8b", "mixtral-8x7b", "gpt-oss-20b")))]
    argv += ["--lever", draw(st.sampled_from(OPTS + ("nope",)))]  # one lever: three searches, not fifteen
    argv += draw(limit_flags())
    argv += _opt(draw, "--from-round", st.sampled_from(ROUNDS + ("v9.9", "")), 8)
    argv += ["--format", draw(st.sampled_from(("json", "csv", "table")))]
    argv += _opt(draw, "--plot", out_path(ws, (".png",)), 4)
    return argv


@st.composite
def validate_argv(draw, ws: Workspace) -> list[str]:
    fmt = draw(st.sampled_from(("json", "csv", "table")))
    argv = ["validate", "--data", draw(data_csv(ws)), "--format", fmt]
    argv += _opt(draw, "--out", out_path(ws, {"json": (".json",), "csv": (".csv",), "table": (".txt",)}[fmt]), 3)
    argv += _opt(draw, "--plot", out_path(ws, (".png", ".svg", ".pdf")), 6)
    if draw(st.integers(0, 5)) == 0:
        argv.append("--force")
    return argv


@st.composite
def calibrate_argv(draw, ws: Workspace) -> list[str]:
    """Calibrate with data that fails before any fit (a fit takes tens of seconds)."""
    argv = ["calibrate", "--data", draw(data_csv(ws, always_bad=True))]
    argv += _opt(draw, "--out", st.sampled_from((str(ws.bundle), str(ws.bundle / "hardware_profiles"), str(ws.out),
                                                 str(ws.out / "notes.txt"), ".", str(ws.out / "cal"))), 2)
    if draw(st.integers(0, 3)) == 0:
        argv.append("--in-place")
    argv += _opt(draw, "--hardware", st.sampled_from(HARDWARE + ("nope",)), 3)
    return argv


@st.composite
def plan_argv(draw, ws: Workspace) -> list[str]:
    hw = ",".join(draw(st.lists(st.sampled_from(HARDWARE[:3] + ("nope",)), min_size=1, max_size=2)))
    argv = ["plan", "--hardware", hw, "--scenario", draw(st.sampled_from(("chat-1k-1k", "mlperf-llama3.1-8b-server"))),
            "--model", "llama3.1-8b", "--max-accelerators", draw(number(("8", "64")))]
    argv += [draw(st.sampled_from(("--target-tokens-per-s", "--target-requests-per-s"))),
             draw(number(("1000", "50000")))]
    argv += _opt(draw, "--price-per-hour", number(("0", "2")), 4)
    argv += draw(limit_flags())
    argv += ["--format", draw(st.sampled_from(("json", "csv", "table", "xml")))]
    argv += _opt(draw, "--out", out_path(ws, (".json", ".csv")), 3)
    argv += _opt(draw, "--plot", out_path(ws, (".png",)), 6)
    return argv


@st.composite
def curve_argv(draw, ws: Workspace) -> list[str]:
    argv = ["curve", *draw(system_args(ws))]
    if draw(st.booleans()):
        argv += ["--qps", ",".join(draw(st.lists(number(("1", "10", "50")), min_size=1, max_size=3)))]
    else:
        argv += _opt(draw, "--points", number(("2", "5")), 2)
    argv += ["--format", draw(st.sampled_from(("json", "csv", "table")))]
    argv += _opt(draw, "--out", out_path(ws, (".csv", ".json")), 4)
    argv += _opt(draw, "--plot", out_path(ws, (".png",)), 6)
    return argv


@st.composite
def profiles_argv(draw, ws: Workspace) -> list[str]:
    choice = draw(st.integers(0, 5))
    if choice == 0:
        return ["profiles", "list", draw(st.sampled_from(("hardware", "models", "scenarios", "gpus")))]
    if choice == 1:
        return ["schema", draw(st.sampled_from(("hardware", "model", "scenario", "gpu")))]
    if choice == 2:
        return ["--profiles-dir", draw(st.sampled_from((str(ws.inputs), str(ws.out), str(ws.inputs / "fifo.yaml"),
                                                        "/nonexistent"))), "profiles", "list", "hardware"]
    folder, ids = draw(st.sampled_from((("hardware_profiles", HARDWARE), ("model_profiles", MODELS),
                                        ("scenarios", SCENARIOS))))
    argv = ["profiles", "show", draw(profile_arg(ws, folder, ids))]
    argv += _opt(draw, "--kind", st.sampled_from(("hardware", "model", "scenario", "gpu")), 3)
    return argv


def argvs(ws: Workspace) -> st.SearchStrategy[list[str]]:
    """A command line for any command, weighted towards run (the most flags)."""
    weights = ((run_argv, 8), (pareto_argv, 3), (profiles_argv, 3), (calibrate_argv, 2), (validate_argv, 1),
               (ablate_argv, 1), (plan_argv, 1), (curve_argv, 1))
    return st.one_of([make(ws) for make, w in weights for _ in range(w)])


@contextlib.contextmanager
def workspace(root: str | Path | None = None, timeout_s: float = 20.0):
    """A Workspace active for the block (the CLI sees its bundle copy); removed afterwards."""
    ws = Workspace(root, timeout_s)
    try:
        with ws:
            yield ws
    finally:
        if root is None:
            shutil.rmtree(ws.root, ignore_errors=True)


__all__ = ["Workspace", "Outcome", "argvs", "workspace", "bad_json_numbers", "Hang"]
