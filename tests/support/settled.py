"""What tests of deletion and erasure ask: is a token's queue done, and which files under a
directory still hold some text (every byte read, as an erasure must leave none)."""

from __future__ import annotations

from pathlib import Path

from tests.support.proxy import Proxy


def jobs_settled(proxy: Proxy, token_id: int) -> bool:
    """Every job of every consumer of the token is done (none pending, running or failed)."""
    consumers = proxy.admin("GET", f"/tokens/{token_id}/jobs").json()["consumers"]
    return bool(consumers) and all(set(c) == {"done"} for c in consumers.values())


def files_holding(root: Path, marker: str) -> list[str]:
    """The files under `root` whose bytes contain `marker`, relative to it."""
    needle = marker.encode()
    return sorted(
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file() and needle in p.read_bytes()
    )
