"""The CLI from any folder: `--home` / `MEMORY_BRIDGE_HOME` point it at the install (its .env
and data), `--data-dir` at a data folder, and a folder that is not initialised is named with
its absolute path and how to point elsewhere."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.proxy import REPO


def _env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("MEMORY_BRIDGE_", "MEMORY_TEMPLATE", "DATABASE_URL"))
    }
    env.update(MEM0_TELEMETRY="False", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", **extra)
    return env


def _cli(cwd: Path, *argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memory_bridge", *argv],
        cwd=cwd,
        env=_env(**env),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_cli_finds_its_install_from_another_folder(tmp_path: Path) -> None:
    home, elsewhere = tmp_path / "install", tmp_path / "elsewhere"
    home.mkdir()
    elsewhere.mkdir()
    (home / ".env").write_text(
        f"MEMORY_TEMPLATE_PATH={REPO / 'templates' / 'memory_template.md'}\n"
        f"MEMORY_TEMPLATE_ZH_PATH={REPO / 'templates' / 'memory_template_zh.md'}\n"
        "EPISODIC_DEFAULT_EMBEDDER=none\n"
    )
    made = _cli(elsewhere, "--home", str(home), "init")
    assert made.returncode == 0, made.stdout + made.stderr
    assert (home / "data" / "memory_bridge.db").is_file()
    assert not (elsewhere / "data").exists()

    lost = _cli(elsewhere, "token", "list")
    assert lost.returncode != 0
    said = lost.stdout + lost.stderr
    assert f"{elsewhere / 'data'} is not initialised" in said and "--home" in said, said

    for found in (
        _cli(elsewhere, "token", "list", MEMORY_BRIDGE_HOME=str(home)),
        _cli(elsewhere, "--data-dir", str(home / "data"), "token", "list"),
    ):
        assert found.returncode == 0, found.stdout + found.stderr
        assert "No service tokens yet" in found.stdout

    missing = _cli(elsewhere, "--home", str(tmp_path / "nowhere"), "token", "list")
    assert missing.returncode != 0
    assert f"{tmp_path / 'nowhere'}: no such folder" in missing.stdout + missing.stderr
