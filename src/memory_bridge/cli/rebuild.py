"""`memory-bridge rebuild`: rebuild a token's vectors from the event log, with a progress line.

With `--url` it starts the rebuild through a running server's admin API and follows it there.
Without, it works on the local database and vector store and runs the job itself (a worker in
this process, until the rebuild switched): the embedded vector store belongs to one process,
so stop `serve` first, or use `--url`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any, Literal

import httpx
import typer

from memory_bridge.cli.common import (
    CliError,
    TokenFileOption,
    UrlOption,
    admin_token_from,
    initialised_settings,
)
from memory_bridge.core.errors import ProxyError

POLL = 0.5
REEXTRACT = "reextract"
Layer = Literal["episodic", "longterm", "all"]


def register(cli: typer.Typer) -> None:
    cli.command("rebuild")(rebuild_command)


def rebuild_command(
    token: Annotated[int, typer.Option("--token", min=1, help="The token's id.")],
    layer: Annotated[
        str, typer.Option(help="episodic, longterm (Mem0's facts, no LLM call) or all.")
    ] = "episodic",
    reextract: Annotated[
        bool,
        typer.Option(
            "--reextract",
            help="longterm/all: run the memory LLM again over every stored turn (one call "
            "per turn; the facts change), in place.",
        ),
    ] = False,
    url: UrlOption = None,
    admin_token_file: TokenFileOption = None,
) -> None:
    """Rebuild a token's vectors from the event log into a new shard, then switch to it."""
    if layer not in ("episodic", "longterm", "all"):
        _fail(f"unknown layer {layer!r}: episodic, longterm or all")
    if reextract and layer == "episodic":
        _fail("--reextract applies to --layer longterm or all")
    try:
        states = asyncio.run(_follow(token, layer, url, admin_token_file, reextract))
    except (ProxyError, CliError) as exc:
        _fail(str(exc))
    except httpx.HTTPError as exc:
        _fail(f"could not reach {url} ({type(exc).__name__})")
    typer.echo("", err=True)
    for name, state in states.items():
        if name == REEXTRACT:
            failed = state.get("failed", 0)
            typer.echo(f"Token {token}: longterm: {state['done']} turn(s) re-extracted.")
            if failed:
                _fail(f"{failed} re-extraction job(s) failed: see GET .../jobs")
            continue
        if state.get("state") == "failed":
            _fail(f"the {name} rebuild failed: {state.get('error')}")
        active = state.get("active") or {}
        what = "turn(s)" if name == "episodic" else "fact event(s)"
        typer.echo(
            f"Token {token}: {name}: {state.get('done', 0)} {what} rebuilt into "
            f"{active.get('model')} ({active.get('dims')} dims)."
        )


def _progress(states: dict[str, dict[str, Any]]) -> None:
    parts = [
        f"{name} {s.get('state')} {s.get('done', 0)}/{s.get('total', 0)}"
        for name, s in states.items()
    ]
    typer.echo("\rrebuild: " + ", ".join(parts), err=True, nl=False)


def _jobs_state(summary: dict[str, Any], total: int) -> dict[str, Any]:
    """The re-extraction's progress from the job queue's counts of the long-term consumer."""
    counts: dict[str, int] = summary.get("consumers", {}).get("longterm", {})
    waiting = counts.get("pending", 0) + counts.get("running", 0)
    failed = counts.get("failed", 0) + counts.get("unknown", 0)
    return {
        "state": "running" if waiting else "idle",
        "done": max(0, total - waiting - failed),
        "total": total,
        "failed": failed,
    }


async def _until_done(
    read: Callable[[], Awaitable[dict[str, Any]]],
    layers: list[str],
    jobs: Callable[[], Awaitable[dict[str, Any]]] | None,
    turns: int,
) -> dict[str, dict[str, Any]]:
    while True:
        found = await read()
        states = {name: dict(found.get(name) or {}) for name in layers}
        if jobs is not None:
            states[REEXTRACT] = _jobs_state(await jobs(), turns)
        _progress(states)
        if all(s.get("state") != "running" for s in states.values()):
            return states
        await asyncio.sleep(POLL)


async def _follow(
    token: int, layer: str, url: str | None, token_file: Path | None, reextract: bool
) -> Any:
    if url:
        return await _follow_remote(token, layer, url, token_file, reextract)
    return await _follow_local(token, layer, reextract)


async def _follow_remote(
    token: int, layer: str, url: str, token_file: Path | None, reextract: bool
) -> Any:
    """Start the rebuild through a running server's admin API and poll it."""
    headers = {"Authorization": f"Bearer {admin_token_from(token_file)}"}
    async with httpx.AsyncClient(
        base_url=url.rstrip("/") + "/v1/admin", headers=headers, timeout=30.0
    ) as client:
        params: dict[str, Any] = {"layer": layer}
        if reextract:
            params["reextract"] = "true"
        started = await client.post(f"/tokens/{token}/rebuild", params=params)
        if not started.is_success:
            raise _remote_error(started)
        layers = [layer] if layer != "all" else list(started.json()["layers"])
        turns = started.json().get("reextract_turns")

        async def read(path: str, key: str | None) -> dict[str, Any]:
            reply = await client.get(f"/tokens/{token}/{path}")
            if not reply.is_success:
                raise _remote_error(reply)
            found: dict[str, Any] = reply.json()[key] if key else reply.json()
            return found

        async def read_remote() -> dict[str, Any]:
            return await read("rebuild", "layers")

        async def jobs_remote() -> dict[str, Any]:
            return await read("jobs", None)

        if turns is None:
            return await _until_done(read_remote, layers, None, 0)
        rebuilt = [name for name in layers if name != "longterm"]
        return await _until_done(read_remote, rebuilt, jobs_remote, int(turns))


async def _follow_local(token: int, layer: str, reextract: bool) -> Any:
    """Run the rebuild in this process, on the local data directory (the server stopped)."""
    from memory_bridge.events import queue_reads
    from memory_bridge.jobs.wiring import create_worker
    from memory_bridge.lifecycle.rebuild import layers_of, reindex_state, start_rebuild
    from memory_bridge.lifecycle.reextract import start_reextract
    from memory_bridge.sources.services import open_memory_services

    runtime = await open_memory_services(initialised_settings())
    worker = create_worker(runtime)
    try:
        layers = await layers_of(runtime, token, layer)
        if reextract and "longterm" not in layers:
            raise CliError("the token has no long-term memory")
        turns = None
        for name in layers:
            if reextract and name == "longterm":
                turns = await start_reextract(runtime, token)
            else:
                await start_rebuild(runtime, token, name)
        worker.start()

        async def read_local() -> dict[str, Any]:
            return await reindex_state(runtime, token) or {}

        async def jobs_local() -> dict[str, Any]:
            return await runtime.db.run(lambda conn: queue_reads.summary(conn, token))

        if turns is None:
            return await _until_done(read_local, layers, None, 0)
        rebuilt = [name for name in layers if name != "longterm"]
        return await _until_done(read_local, rebuilt, jobs_local, turns)
    finally:
        await worker.stop(runtime.settings.background_drain_timeout)
        await runtime.close()


def _remote_error(reply: httpx.Response) -> ProxyError:
    try:
        error = reply.json()["error"]
        return ProxyError(reply.status_code, str(error["type"]), str(error["message"]))
    except (ValueError, KeyError, TypeError):
        return ProxyError(reply.status_code, "api_error", f"HTTP {reply.status_code}")


def _fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(1)
