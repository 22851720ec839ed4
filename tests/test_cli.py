"""CLI smoke tests: every command's --help, the profile commands, schema, exit codes."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import typer
import typer.main

import infersim
from infersim.cli import app, handle_errors
from infersim.errors import InfeasibleError, SpecError

from conftest import FOLDERS, REPO, bundled_ids


def _command_paths(command, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command and group below ``command`` (a click/typer command) as an argv prefix."""
    out = [prefix]
    if getattr(command, "commands", None):
        for name, sub in sorted(command.commands.items()):
            out += _command_paths(sub, (*prefix, name))
    return out


COMMANDS = _command_paths(typer.main.get_command(app))


def test_the_documented_commands_exist():
    assert {("profiles", "list"), ("profiles", "show"), ("schema",)} <= set(COMMANDS)


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda a: " ".join(a) or "infersim")
def test_every_command_has_help(runner, argv):
    result = runner.invoke(app, [*argv, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.stdout


def test_version(runner):
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.stdout.strip() == f"infersim {infersim.__version__}"


def test_profiles_list_shows_every_bundled_id(runner):
    result = runner.invoke(app, ["profiles", "list"])
    assert result.exit_code == 0, result.output
    ids = set().union(*(bundled_ids(k) for k in FOLDERS))
    assert ids and [i for i in sorted(ids) if i not in result.stdout] == []


@pytest.mark.parametrize("group, kind", [("hardware", "hardware"), ("models", "model"), ("scenarios", "scenario")])
def test_profiles_list_one_group(runner, group, kind):
    result = runner.invoke(app, ["profiles", "list", group])
    assert result.exit_code == 0, result.output
    assert all(i in result.stdout for i in bundled_ids(kind))
    others = set().union(*(bundled_ids(k) for k in FOLDERS if k != kind)) - bundled_ids(kind)
    first_column = set(re.findall(r"^│ (\S+) ", result.stdout, re.M))
    assert first_column == bundled_ids(kind) and not first_column & others


def test_profiles_show_deepseek_r1_reports_671b_total_37b_active(runner):
    result = runner.invoke(app, ["profiles", "show", "deepseek-r1"])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "671.0 B" in out and "37.6 B" in out  # derived 671.03 / 37.55 (official 671 B / 37 B)
    assert "70,272 B" in out and "35,136 B" in out  # KV bytes per token, bf16 and fp8
    assert "kv_lora_rank: 512" in out  # the YAML itself is printed


def test_profiles_show_hardware_derives_si_rates(runner):
    result = runner.invoke(app, ["profiles", "show", "h100-sxm"])
    assert result.exit_code == 0, result.output
    assert "9.894e+14 FLOP/s" in result.stdout  # 989.4 TFLOP/s bf16 dense
    assert "3.35e+12 B/s" in result.stdout  # 3.35 TB/s HBM3


def test_profiles_show_scenario(runner):
    result = runner.invoke(app, ["profiles", "show", "mlperf-deepseek-r1-server"])
    assert result.exit_code == 0, result.output
    assert "p99 TTFT limit" in result.stdout and "2000 ms" in result.stdout


def test_profiles_show_file_path_detects_kind_from_folder(runner):
    result = runner.invoke(app, ["profiles", "show", str(REPO / "hardware_profiles" / "h100-sxm.yaml")])
    assert result.exit_code == 0, result.output
    assert "FLOP/s" in result.stdout


def test_profiles_show_file_outside_the_folders_detects_kind_from_keys(runner, tmp_path):
    path = tmp_path / "my-model.yaml"
    shutil.copy(REPO / "model_profiles" / "llama3.1-8b.yaml", path)
    result = runner.invoke(app, ["profiles", "show", str(path)])
    assert result.exit_code == 0, result.output
    assert "131,072 B" in result.stdout


def test_unknown_id_suggests_the_nearest(runner):
    result = runner.invoke(app, ["profiles", "show", "h100"])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: ") and "h100-sxm" in result.stderr
    assert result.stdout == ""


def test_ambiguous_id_asks_for_kind(runner, tmp_path, monkeypatch):
    (tmp_path / "model_profiles").mkdir()
    shutil.copy(REPO / "model_profiles" / "llama3.1-8b.yaml", tmp_path / "model_profiles" / "h100-sxm.yaml")
    monkeypatch.setenv("INFERSIM_PROFILES", str(tmp_path))
    result = runner.invoke(app, ["profiles", "show", "h100-sxm"])
    assert result.exit_code == 2 and "--kind" in result.stderr
    result = runner.invoke(app, ["profiles", "show", "h100-sxm", "--kind", "model"])
    assert result.exit_code == 0 and "131,072 B" in result.stdout


@pytest.mark.parametrize("kind", ["hardware", "model", "scenario"])
def test_schema_is_json(runner, kind):
    result = runner.invoke(app, ["schema", kind])
    assert result.exit_code == 0, result.output
    schema = json.loads(result.stdout)
    assert isinstance(schema, dict) and ("properties" in schema or "oneOf" in schema)


def test_schema_hardware_names_its_fields(runner):
    schema = json.loads(runner.invoke(app, ["schema", "hardware"]).stdout)
    assert {"compute", "memory", "scale_up", "scale_out", "price"} <= set(schema["properties"])
    assert schema.get("additionalProperties") is False  # unknown keys are rejected


@pytest.mark.parametrize("argv", [
    ["profiles", "list", "gpus"], ["schema", "gpu"], ["no-such-command"], ["profiles", "show"],
    ["profiles", "show", "h100-sxm", "--kind", "gpu"],
])
def test_bad_usage_exits_2(runner, argv):
    result = runner.invoke(app, argv)
    assert result.exit_code == 2
    assert "Traceback" not in result.output


# ---- the error wrapper that every command uses -------------------------------------------
def _app_raising(exc: BaseException) -> typer.Typer:
    demo = typer.Typer()

    @demo.command()
    @handle_errors
    def boom(n: int = 1) -> None:
        raise exc

    @demo.command()
    @handle_errors
    def fine() -> None:
        typer.echo("ok")

    return demo


@pytest.mark.parametrize("exc, code, prefix", [
    (SpecError("Input should be greater than 0", file="x.yaml", path="memory.hbm_gib"), 2, "error: "),
    (InfeasibleError("no layout fits:\nweights exceed memory"), 1, "infeasible: "),
    (RuntimeError("a bug"), 3, "internal error: "),
])
def test_handle_errors_maps_exceptions_to_one_line_and_exit_code(runner, monkeypatch, exc, code, prefix):
    monkeypatch.delenv("INFERSIM_DEBUG", raising=False)
    result = runner.invoke(_app_raising(exc), ["boom", "--n", "3"])
    assert result.exit_code == code
    assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith(prefix), result.stderr
    assert "Traceback" not in result.output
    assert runner.invoke(_app_raising(exc), ["fine"]).stdout == "ok\n"


def test_handle_errors_keeps_the_signature_for_typer(runner):
    result = runner.invoke(_app_raising(RuntimeError()), ["boom", "--help"])
    assert result.exit_code == 0 and "--n" in result.stdout


# ---- the real entry points (subprocess: real stderr, global options) ---------------------
def _run(*argv: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "infersim", *argv], capture_output=True, text=True, cwd=cwd,
                          timeout=60, env={**os.environ, "INFERSIM_PROFILES": ""})


def test_python_dash_m_and_profiles_dir(tmp_path):
    (tmp_path / "hardware_profiles").mkdir()
    text = (REPO / "hardware_profiles" / "h100-sxm.yaml").read_text(encoding="utf-8")
    (tmp_path / "hardware_profiles" / "my-derated-gpu.yaml").write_text(text.replace("hbm_bandwidth_tb_s: 3.35",
                                                                                     "hbm_bandwidth_tb_s: 3.0"))
    proc = _run("--profiles-dir", str(tmp_path), "profiles", "list", "hardware", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "my-derated-gpu" in proc.stdout and "h100-sxm" in proc.stdout


def test_profiles_dir_that_does_not_exist_exits_2(tmp_path):
    proc = _run("--profiles-dir", str(tmp_path / "absent"), "profiles", "list")
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: ") and "absent" in proc.stderr


@pytest.mark.parametrize("content", [b"\xff\xfe not utf-8", b"- just\n- a list\n", b"compute: {}\nfoo: 1\n"])
def test_bad_file_exits_2_with_one_stderr_line(tmp_path, content):
    path = tmp_path / "broken.yaml"
    path.write_bytes(content)
    proc = _run("profiles", "show", str(path))
    assert proc.returncode == 2
    assert proc.stdout == "" and proc.stderr.count("\n") == 1 and "broken.yaml" in proc.stderr
    assert "Traceback" not in proc.stderr
