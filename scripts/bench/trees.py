"""Two source trees measured side by side: the trees of a run, and one call in a fresh process
on one of them (so each tree imports its own `memory_bridge`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def source_trees(baseline: str | None) -> dict[str, str]:
    """`src` folders by name: this tree, and the `--baseline-src` repository's if given."""
    trees = {"this tree": str(REPO / "src")}
    if baseline:
        trees["baseline"] = str(Path(baseline) / "src")
    return trees


def call_in_tree(src: str, module: Path, call: str) -> str:
    """`print(<call>)` in a fresh Python running `src`'s code, with `module` (a script beside
    this one) imported as `m`; its last line of output."""
    env = {**os.environ, "PYTHONPATH": src, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    code = (
        f"import sys; sys.path.insert(0, {str(module.parent)!r}); "
        f"import {module.stem} as m; print({call})"
    )
    out = subprocess.run(  # noqa: S603 (our own code)
        [sys.executable, "-c", code], env=env, capture_output=True, text=True
    )
    if out.returncode != 0:
        raise SystemExit(out.stderr[-2000:])
    return out.stdout.strip().splitlines()[-1]
