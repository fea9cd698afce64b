"""The house rule: packages import only the packages below them, and nothing imports in a
circle (the contracts in pyproject.toml, checked by import-linter)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINT = Path(sys.executable).with_name("lint-imports")


def _lint(src: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT), str(ROOT / "pyproject.toml"), "--no-cache"],
        cwd=src,
        env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_package_keeps_its_layers_and_has_no_cycles() -> None:
    result = _lint(ROOT / "src")
    assert result.returncode == 0, result.stdout + result.stderr


def test_an_upward_import_or_a_cycle_is_caught(tmp_path: Path) -> None:
    src = tmp_path / "src"
    shutil.copytree(ROOT / "src" / "memory_bridge", src / "memory_bridge")
    errors = src / "memory_bridge" / "core" / "errors.py"
    errors.write_text(errors.read_text() + "\nimport memory_bridge.chat.handler  # upward\n")
    result = _lint(src)
    assert result.returncode != 0
    assert "memory_bridge.core.errors -> memory_bridge.chat.handler" in result.stdout
