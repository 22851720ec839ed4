"""Shared fixtures: the bundled profile files, parametrized over a glob of the three folders."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from typer.testing import CliRunner

REPO = Path(__file__).resolve().parent.parent

# the scheduler's tables go to a disk cache (infersim.table_cache): the tests use their own folder
if "INFERSIM_CACHE_DIR" not in os.environ:
    os.environ["INFERSIM_CACHE_DIR"] = tempfile.mkdtemp(prefix="infersim-test-tables-")
    atexit.register(shutil.rmtree, os.environ["INFERSIM_CACHE_DIR"], True)
FOLDERS = {"hardware": "hardware_profiles", "model": "model_profiles", "scenario": "scenarios"}

# File I/O and CLI invocations make single examples slow now and then; timing is not under test.
# `python -m pytest --hypothesis-profile=thorough` runs 20x more examples.
settings.register_profile("infersim", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", parent=settings.get_profile("infersim"), max_examples=2000)
settings.load_profile("infersim")


def bundled_files(kind: str) -> list[Path]:
    """The bundled YAML files of ``kind`` in the source tree."""
    return sorted((REPO / FOLDERS[kind]).glob("*.yaml"))


def bundled_ids(kind: str) -> set[str]:
    return {p.stem for p in bundled_files(kind)}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """``bundled_profile`` → (kind, path) for every bundled YAML; ``bundled_model`` → every model file."""
    if "bundled_profile" in metafunc.fixturenames:
        cases = [(k, p) for k in FOLDERS for p in bundled_files(k)]
        metafunc.parametrize("bundled_profile", cases, ids=[f"{k}/{p.stem}" for k, p in cases])
    if "bundled_model" in metafunc.fixturenames:
        files = bundled_files("model")
        metafunc.parametrize("bundled_model", files, ids=[p.stem for p in files])


@pytest.fixture
def runner() -> CliRunner:
    """A typer CliRunner (stdout and stderr captured separately)."""
    return CliRunner()


@pytest.fixture
def repo() -> Path:
    return REPO


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--regen-golden", action="store_true", default=False,
                     help="Rewrite tests/golden/*.json from the current model instead of comparing.")


@pytest.fixture
def regen_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--regen-golden"))
