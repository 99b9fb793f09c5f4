"""MEDRETRIEVE_CORE_DIR (docs/development.md): a developer build's native core is the one loaded, even where an
editable install's finder would load the installed one, and a folder without a core is an ImportError naming it."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import medretrieve._core as installed

SHOW_CORE = "import medretrieve._core as c; print(c.__file__)"


def _python(code: str, core_dir: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "MEDRETRIEVE_CORE_DIR": str(core_dir)}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)


def test_the_core_of_the_named_build_folder_is_loaded(tmp_path) -> None:
    build = tmp_path / "build"
    build.mkdir()
    shutil.copy(installed.__file__, build / Path(installed.__file__).name)
    run = _python(SHOW_CORE, build)
    assert run.returncode == 0, run.stderr
    assert Path(run.stdout.strip()).parent == build


def test_a_folder_without_a_core_is_named(tmp_path) -> None:
    run = _python(SHOW_CORE, tmp_path)
    assert run.returncode != 0
    assert f"MEDRETRIEVE_CORE_DIR={tmp_path} holds no native core" in run.stderr


def test_without_the_variable_the_installed_core_loads() -> None:
    env = {k: v for k, v in os.environ.items() if k != "MEDRETRIEVE_CORE_DIR"}
    run = subprocess.run([sys.executable, "-c", SHOW_CORE], env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert Path(run.stdout.strip()) == Path(installed.__file__)
