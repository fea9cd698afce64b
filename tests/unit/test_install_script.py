"""scripts/install.py: which torch command run.sh and test.sh run given what is installed and
what is reachable, and run.sh's skip-when-unchanged stamp. No network: "reachable" is a
function given to the planner, or a loopback server."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from types import ModuleType
from typing import ClassVar

import pytest
from tests.support.chat_helpers import closed_port_url
from tests.support.proxy import REPO

SCRIPT = REPO / "scripts" / "install.py"
PY = "/venv/bin/python"
PIP = (PY, "-m", "pip", "install", "--disable-pip-version-check", "--quiet")


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("install_script", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


install = _load()
INDEX = install.CPU_INDEX


class Reach:
    """A stand-in for the probe: answers `ok` and records what it was asked."""

    def __init__(self, ok: bool) -> None:
        self.ok = ok
        self.asked: list[str] = []

    def __call__(self, url: str) -> bool:
        self.asked.append(url)
        return self.ok


@pytest.fixture(autouse=True)
def _no_index_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TORCH_CPU_INDEX", raising=False)


def test_nothing_installed_and_the_cpu_index_answers_installs_from_it() -> None:
    reach = Reach(True)
    plan = install.torch_plan(PY, None, reach, platform="linux")
    assert plan.command == (*PIP, "torch==2.13.0", "--index-url", INDEX)
    assert reach.asked == [INDEX]


def test_nothing_installed_and_no_route_to_the_index_installs_the_pinned_version() -> None:
    plan = install.torch_plan(PY, None, Reach(False), platform="linux")
    assert plan.command == (*PIP, "torch==2.13.0")
    assert "not reachable" in plan.reason


def test_the_pinned_cpu_build_installed_is_left_alone_without_a_probe() -> None:
    reach = Reach(True)
    plan = install.torch_plan(PY, "2.13.0+cpu", reach, platform="linux")
    assert plan.command is None and reach.asked == []


def test_a_cuda_build_of_the_pinned_version_is_replaced_when_the_index_answers() -> None:
    plan = install.torch_plan(PY, "2.13.0", Reach(True), platform="linux")
    assert plan.command == (
        *PIP,
        "--force-reinstall",
        "--no-deps",
        "torch==2.13.0",
        "--index-url",
        INDEX,
    )
    # Without the index there is nothing better to install: it stays.
    assert install.torch_plan(PY, "2.13.0", Reach(False), platform="linux").command is None


def test_another_version_is_replaced_by_the_pinned_one_either_way() -> None:
    assert install.torch_plan(PY, "2.12.1+cpu", Reach(True), platform="linux").command == (
        *PIP,
        "torch==2.13.0",
        "--index-url",
        INDEX,
    )
    assert install.torch_plan(PY, "2.12.1", Reach(False), platform="linux").command == (
        *PIP,
        "torch==2.13.0",
    )


def test_macos_wheels_are_cpu_builds_without_a_label() -> None:
    assert install.torch_plan(PY, "2.13.0", Reach(True), platform="darwin").command is None


def test_a_mirror_replaces_the_index(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCH_CPU_INDEX", "https://mirror.example/torch-cpu")
    reach = Reach(True)
    plan = install.torch_plan(PY, None, reach, platform="linux")
    assert plan.command == (
        *PIP,
        "torch==2.13.0",
        "--index-url",
        "https://mirror.example/torch-cpu",
    )
    assert reach.asked == ["https://mirror.example/torch-cpu"]


class _Index(BaseHTTPRequestHandler):
    status = 200
    paths: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        self.paths.append(self.path)
        self.send_response(self.status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def index_server() -> Iterator[tuple[str, type[_Index]]]:
    handler = type("Handler", (_Index,), {"paths": []})
    server = HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/whl/cpu", handler
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(("status", "reachable"), [(200, True), (404, True), (503, False)])
def test_the_probe_asks_the_index_for_torch(
    index_server: tuple[str, type[_Index]], status: int, reachable: bool
) -> None:
    url, handler = index_server
    handler.status = status
    assert install.index_reachable(url, timeout=10) is reachable
    assert handler.paths == ["/whl/cpu/torch/"]


def test_the_probe_says_no_for_a_closed_port_or_a_bad_url() -> None:
    assert install.index_reachable(closed_port_url(), timeout=10) is False
    assert install.index_reachable("not a url", timeout=10) is False


def test_install_torch_prints_the_fallback_when_the_index_is_down(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TORCH_CPU_INDEX", closed_port_url())
    monkeypatch.setattr(install, "installed_torch", lambda python: None)
    install.install_torch(PY, dry_run=True)
    out = capsys.readouterr().out
    assert "is not reachable" in out
    assert out.splitlines()[-1] == "+ " + " ".join((*PIP, "torch==2.13.0"))


def test_installed_torch_reads_the_version_without_importing_it() -> None:
    version = install.installed_torch(sys.executable)
    try:
        from importlib.metadata import version as meta_version

        expected: str | None = meta_version("torch")
    except Exception:
        expected = None
    assert version == expected


def _run_project(stamp: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "project", "--stamp", str(stamp), *extra],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_run_sh_skips_the_install_when_nothing_changed(tmp_path: Path) -> None:
    stamp = tmp_path / "stamp"
    stamp.write_text(install.stamp_value("local") + "\n")
    done = _run_project(stamp, "--extras", "local")
    assert done.returncode == 0, done.stderr
    assert "Dependencies unchanged since the last install" in done.stdout
    assert "+ " not in done.stdout  # no command ran


def test_a_changed_input_or_other_extras_install_again(tmp_path: Path) -> None:
    stamp = tmp_path / "stamp"
    stamp.write_text(install.stamp_value("local") + "\n")
    # Other extras: the stamp no longer matches (dry run: printed, not run, stamp untouched).
    done = _run_project(stamp, "--extras", "", "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "unchanged" not in done.stdout
    assert done.stdout.splitlines()[-1].endswith(
        "pip install --disable-pip-version-check --quiet -e ."
    )
    assert "torch" not in done.stdout  # no local extra, no torch
    assert stamp.read_text().strip() == install.stamp_value("local")
    # A changed pyproject.toml changes the stamp.
    copy = tmp_path / "repo"
    (copy / "scripts").mkdir(parents=True)
    for name in install.STAMPED:
        (copy / name).write_bytes((REPO / name).read_bytes())
    before = install.stamp_value("local", copy)
    (copy / "pyproject.toml").write_text((REPO / "pyproject.toml").read_text() + "\n# changed\n")
    assert install.stamp_value("local", copy) != before
    assert install.up_to_date(tmp_path / "missing", before) is False


def test_the_scripts_use_the_installer() -> None:
    run_sh = (REPO / "scripts" / "run.sh").read_text()
    test_sh = (REPO / "scripts" / "test.sh").read_text()
    assert "scripts/install.py project" in run_sh and "--stamp" in run_sh
    assert "scripts/install.py torch" in test_sh
    assert "torch==" not in run_sh + test_sh  # the pin lives in one place
