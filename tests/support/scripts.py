"""Run one of the repository's scripts as a user would, and read the JSON report it writes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support.proxy import REPO


def run_script(script: str, *args: str, workdir: Path) -> dict[str, Any]:
    """`python scripts/<script> <args> --json <workdir>/report.json`; the report, with the
    script's stdout under `"stdout"`. Fails the test when the script exits non-zero."""
    out = workdir / "report.json"
    done = subprocess.run(
        [sys.executable, str(Path(REPO) / "scripts" / script), *args, "--json", str(out)],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=900,  # a safety net against a hang, not a performance assertion
        check=False,
    )
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr[-4000:]}"
    data: dict[str, Any] = json.loads(out.read_text())
    data["stdout"] = done.stdout
    return data
