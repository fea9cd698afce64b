"""`serve` starts without the libraries it does not need yet (docs/decisions.md, "Start-up
imports"): qdrant-client (the server adapter's, ~0.7 s to import) and openai (an API embedder's
or Mem0's, ~0.3 s) are loaded where they are used, not by importing the app or running its
start-up on the embedded engine; the MCP SDK (~0.4 s) is loaded by the warm-up, after the server
answers. Which modules are loaded, not how long it takes: no clock."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("qdrant_client", "openai", "mem0")
NOT_BEFORE_SERVING = (*HEAVY, "mcp")

# In a fresh interpreter: import the app, note what is loaded, then run its whole start-up
# (the lifespan: storage, the embedded vector engine, the worker, MCP, the warm-up) on a fresh
# data directory with BM25-only episodic memory, and note again.
_CHILD = """
import asyncio, json, sys
from pathlib import Path
from memory_bridge.server.app import create_app
from memory_bridge.cli.main import initialise
from memory_bridge.settings import Settings

loaded = lambda names: sorted(m for m in names if m in sys.modules)
after_import = loaded({not_before!r})
templates = Path({templates!r})
settings = Settings(
    _env_file=None,
    memory_bridge_data_dir=Path(sys.argv[1]),
    database_url="",
    memory_template_path=templates / "memory_template.md",
    memory_template_zh_path=templates / "memory_template_zh.md",
    episodic_default_embedder="none",
    log_level="WARNING",
)
asyncio.run(initialise(settings))
app = create_app(settings)

async def main() -> None:
    async with app.router.lifespan_context(app):
        services = app.state.services
        print(json.dumps({{"serving": loaded({not_before!r})}}))
        while not services.readiness.ready:
            await asyncio.sleep(0.05)

asyncio.run(main())
print(json.dumps({{"import": after_import, "started": loaded({heavy!r})}}))
"""


def _loaded(tmp_path: Path, **env: str) -> dict[str, list[str]]:
    child_env = {
        **{k: v for k, v in os.environ.items() if k != "QDRANT_URL"},
        "PYTHONPATH": str(ROOT / "src"),
        "MEM0_TELEMETRY": "False",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        **env,
    }
    code = _CHILD.format(
        heavy=HEAVY, not_before=NOT_BEFORE_SERVING, templates=str(ROOT / "templates")
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "data")],
        cwd=tmp_path,
        env=child_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, list[str]] = {}
    for line in done.stdout.strip().splitlines()[-2:]:
        result.update(json.loads(line))
    return result


def test_serve_starts_on_the_embedded_engine_without_qdrant_client_or_openai(
    tmp_path: Path,
) -> None:
    loaded = _loaded(tmp_path)
    # "serving": the lifespan is entered (what `/health` 200 waits for), the warm-up under way.
    assert loaded == {"import": [], "serving": [], "started": []}
