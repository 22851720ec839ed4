"""A non-editable install finds its bundled profiles: build a wheel, install it into a fresh
virtual environment, run the ``infersim`` script from another folder."""

from __future__ import annotations

import importlib.util
import os
import site
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, bundled_ids


def _run(argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, **kwargs)
    assert proc.returncode == 0, f"{' '.join(map(str, argv))}\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.mark.slow
def test_wheel_install_finds_bundled_profiles(tmp_path):
    wheels = tmp_path / "wheels"
    # The build backend (hatchling) comes from the test extra; without it pip fetches it.
    isolation = [] if importlib.util.find_spec("hatchling") is None else ["--no-build-isolation"]
    _run([sys.executable, "-m", "pip", "wheel", str(REPO), "--no-deps", "-w", str(wheels), *isolation, "-q"])
    (wheel,) = wheels.glob("infersim-*.whl")

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)])
    bindir = venv / ("Scripts" if os.name == "nt" else "bin")
    vpython = bindir / "python"
    # Dependencies come from the environment running the tests (which may itself be a venv,
    # whose packages --system-site-packages does not see): list its site-packages in a .pth.
    purelib = Path(_run([str(vpython), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    (purelib / "_outer_env.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    _run([sys.executable, "-m", "pip", "--python", str(vpython), "install", "--no-deps", "--no-index", "-q", str(wheel)])

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("INFERSIM_PROFILES", "PYTHONPATH")}
    where = _run([str(vpython), "-c", "import infersim.specs.catalog as c; print(c.bundled_root())"],
                 cwd=elsewhere, env=env).stdout.strip()
    assert Path(where).is_relative_to(venv), f"profiles were found outside the installed package: {where}"

    listed = _run([str(bindir / "infersim"), "profiles", "list", "hardware"], cwd=elsewhere, env=env).stdout
    assert [i for i in sorted(bundled_ids("hardware")) if i not in listed] == []
    shown = _run([str(bindir / "infersim"), "profiles", "show", "deepseek-r1"], cwd=elsewhere, env=env).stdout
    assert "671.0 B" in shown
