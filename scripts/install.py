"""Install MemoryBridge into a virtual environment with a CPU build of torch, wherever it runs.

    python scripts/install.py torch                     # the CPU build of torch only (test.sh)
    python scripts/install.py project --extras local \\
        --stamp .venv/.memory-bridge-install             # torch + `pip install -e .[local]`,
                                                         # skipped when nothing changed (run.sh)
    ... --dry-run                                        # say what would run, run nothing

Why: from the public package index, `torch==2.13.0` on Linux is the CUDA build, which pulls
about sixteen nvidia packages (gigabytes) that the local embedder never uses. PyTorch's own CPU
wheel index has the CPU build; it is used when it answers a short probe. When it does not (no
route to it, as on machines that reach only the public index), the pinned requirement is
installed as pip resolves it, which there means a CPU wheel pip already has at hand.

Standard library only: it runs with the virtual environment's bare Python, before anything is
installed into it. `TORCH_CPU_INDEX` replaces the index URL (a mirror).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

TORCH_VERSION = "2.13.0"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
PROBE_TIMEOUT = 5.0  # seconds: an index that answers at all answers well within this
ROOT = Path(__file__).resolve().parents[1]
# What the project's installed state depends on: a change to any of them reinstalls.
STAMPED = ("pyproject.toml", "scripts/install.py", "scripts/run.sh")
# Quiet: a first run printed ~370 lines of pip progress around the admin token (errors still show).
PIP = ("-m", "pip", "install", "--disable-pip-version-check", "--quiet")


def cpu_index() -> str:
    return os.environ.get("TORCH_CPU_INDEX", "").strip() or CPU_INDEX


def index_reachable(url: str, timeout: float = PROBE_TIMEOUT) -> bool:
    """Whether the index answers an HTTP request within `timeout` (any status below 500: a 404
    for the bare URL still proves it is reachable). Proxies from the environment apply, as
    they do for pip."""
    probe = url.rstrip("/") + "/torch/"
    try:
        # S310: the URL is ours (or the operator's TORCH_CPU_INDEX), http(s) by construction.
        with urllib.request.urlopen(probe, timeout=timeout) as reply:  # noqa: S310
            return int(reply.status) < 500
    except urllib.error.HTTPError as exc:
        return exc.code < 500
    except (OSError, ValueError):  # DNS, refused, timeout, TLS, a malformed override
        return False


def installed_torch(python: str) -> str | None:
    """The version of torch installed for `python` ("2.13.0+cpu"), without importing torch."""
    code = (
        "import importlib.metadata as m\n"
        "try:\n print(m.version('torch'))\n"
        "except m.PackageNotFoundError:\n pass\n"
    )
    done = subprocess.run(  # noqa: S603 (our own interpreter path and code)
        [python, "-c", code], capture_output=True, text=True, check=False
    )
    version = done.stdout.strip()
    return version or None


@dataclass(frozen=True)
class TorchPlan:
    """What to do about torch: `command` is None when the installed build is already right."""

    command: tuple[str, ...] | None
    reason: str


def is_cpu_build(version: str, platform: str = sys.platform) -> bool:
    """`2.13.0+cpu` on Linux and Windows; macOS wheels are CPU builds without a label."""
    return version.endswith("+cpu") or platform == "darwin"


def torch_plan(
    python: str,
    installed: str | None,
    reachable: Callable[[str], bool],
    platform: str = sys.platform,
) -> TorchPlan:
    """The install command given what is installed and whether the CPU index answers.

    - the pinned CPU build installed: nothing to do (no probe either).
    - the CPU index answers: the pinned version from it; a CUDA build of the same version is
      replaced (pip would otherwise call `torch==2.13.0` satisfied and keep it).
    - it does not: the pinned version as pip resolves it, unless that version is installed.
    """
    pinned = f"torch=={TORCH_VERSION}"
    same_version = installed is not None and installed.split("+", 1)[0] == TORCH_VERSION
    if same_version and installed is not None and is_cpu_build(installed, platform):
        return TorchPlan(None, f"torch {installed} (CPU build) is already installed")
    index = cpu_index()
    if reachable(index):
        replace = ("--force-reinstall", "--no-deps") if same_version else ()
        return TorchPlan(
            (python, *PIP, *replace, pinned, "--index-url", index), f"CPU build from {index}"
        )
    if same_version:
        return TorchPlan(None, f"torch {installed} is already installed ({index} not reachable)")
    return TorchPlan(
        (python, *PIP, pinned),
        f"{index} is not reachable: the pinned {pinned} as pip resolves it",
    )


def project_command(python: str, extras: str) -> tuple[str, ...]:
    target = f".[{extras}]" if extras else "."
    return (python, *PIP, "-e", target)


def stamp_value(extras: str, root: Path = ROOT) -> str:
    """A hash of everything the installed state depends on (the files, the extras, Python)."""
    digest = hashlib.sha256(f"{extras}|{sys.version}|{sys.executable}".encode())
    for name in STAMPED:
        path = root / name
        digest.update(name.encode() + b"\0" + (path.read_bytes() if path.exists() else b""))
    return digest.hexdigest()


def up_to_date(stamp: Path, value: str) -> bool:
    try:
        return stamp.read_text().strip() == value
    except OSError:
        return False


def _run(command: Sequence[str], dry_run: bool) -> None:
    print("+ " + " ".join(command), flush=True)
    if not dry_run:
        subprocess.run(command, check=True)  # noqa: S603 (pip with arguments we build)


def install_torch(python: str, dry_run: bool) -> None:
    plan = torch_plan(python, installed_torch(python), index_reachable)
    print(f"torch: {plan.reason}", flush=True)
    if plan.command is not None:
        _run(plan.command, dry_run)


def needs_torch(extras: str) -> bool:
    return "local" in {e.strip() for e in extras.split(",")}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("torch", "project"))
    parser.add_argument("--extras", default="local", help="the project's extras (project)")
    parser.add_argument("--stamp", type=Path, help="skip when unchanged since this stamp")
    parser.add_argument("--dry-run", action="store_true", help="print the commands only")
    args = parser.parse_args(argv)
    python = sys.executable
    if args.what == "torch":
        install_torch(python, args.dry_run)
        return 0
    value = stamp_value(args.extras)
    if args.stamp is not None and up_to_date(args.stamp, value):
        print(
            "Dependencies unchanged since the last install: skipping it "
            f"(delete {args.stamp} to force one).",
            flush=True,
        )
        return 0
    if needs_torch(args.extras):
        install_torch(python, args.dry_run)
    print(f"Installing MemoryBridge (extras: {args.extras or 'none'})...", flush=True)
    _run(project_command(python, args.extras), args.dry_run)
    if args.stamp is not None and not args.dry_run:
        args.stamp.write_text(value + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
