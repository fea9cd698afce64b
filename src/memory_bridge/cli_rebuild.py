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

from memory_bridge.cli_admin import (
    CliError,
    TokenFileOption,
    UrlOption,
    admin_token_from,
    initialised_settings,
)
from memory_bridge.errors import ProxyError

POLL = 0.5
Layer = Literal["episodic", "longterm", "all"]


def register(cli: typer.Typer) -> None:
    cli.command("rebuild")(rebuild_command)


def rebuild_command(
    token: Annotated[int, typer.Option("--token", min=1, help="The token's id.")],
    layer: Annotated[
        str, typer.Option(help="episodic, longterm (not available yet) or all.")
    ] = "episodic",
    url: UrlOption = None,
    admin_token_file: TokenFileOption = None,
) -> None:
    """Rebuild a token's vectors from the event log into a new shard, then switch to it."""
    if layer not in ("episodic", "longterm", "all"):
        _fail(f"unknown layer {layer!r}: episodic, longterm or all")
    # `all` is the episodic layer until the long-term one can be rebuilt (it says why not).
    wanted = "episodic" if layer == "all" else layer
    try:
        state = asyncio.run(_follow(token, wanted, url, admin_token_file))
    except (ProxyError, CliError) as exc:
        _fail(str(exc))
    except httpx.HTTPError as exc:
        _fail(f"could not reach {url} ({type(exc).__name__})")
    typer.echo("", err=True)
    if state.get("state") == "failed":
        _fail(f"the rebuild failed: {state.get('error')}")
    active = state.get("active") or {}
    typer.echo(
        f"Token {token}: {state.get('done', 0)} turn(s) rebuilt into {active.get('model')} "
        f"({active.get('dims')} dims)."
    )


def _progress(state: dict[str, Any]) -> None:
    typer.echo(
        f"\rrebuild: {state.get('state')} {state.get('done', 0)}/{state.get('total', 0)}",
        err=True,
        nl=False,
    )


async def _until_done(read: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
    while True:
        state = await read()
        _progress(state)
        if state.get("state") != "running":
            return state
        await asyncio.sleep(POLL)


async def _follow(token: int, layer: str, url: str | None, token_file: Path | None) -> Any:
    if url:
        headers = {"Authorization": f"Bearer {admin_token_from(token_file)}"}
        async with httpx.AsyncClient(
            base_url=url.rstrip("/") + "/v1/admin", headers=headers, timeout=30.0
        ) as client:
            started = await client.post(f"/tokens/{token}/rebuild", params={"layer": layer})
            if not started.is_success:
                raise _remote_error(started)

            async def read_remote() -> dict[str, Any]:
                reply = await client.get(f"/tokens/{token}/rebuild")
                if not reply.is_success:
                    raise _remote_error(reply)
                found: dict[str, Any] = reply.json()["layers"].get(layer, {})
                return found

            return await _until_done(read_remote)

    from memory_bridge.lifecycle.rebuild import reindex_state, start_rebuild
    from memory_bridge.runtime import open_runtime

    runtime = await open_runtime(initialised_settings())
    worker = runtime.create_worker()
    try:
        await start_rebuild(runtime, token, layer)
        worker.start()

        async def read_local() -> dict[str, Any]:
            found = await reindex_state(runtime, token) or {}
            return dict(found.get(layer, {}))

        return await _until_done(read_local)
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
