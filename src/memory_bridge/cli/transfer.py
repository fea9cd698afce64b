"""`memory-bridge export` and `memory-bridge import`: a token's memory events out to an NDJSON
file and back in, on the local database or (with `--url`) through a running server's admin
API. The rules are the admin API's (docs/operations.md, "Export and import").

Run locally, an import's index jobs wait in the queue for the next `serve` or `worker`.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import IO, Annotated, Any, TypeVar

import httpx
import typer

from memory_bridge.cli.common import (
    CliError,
    TokenFileOption,
    UrlOption,
    admin_token_from,
    initialised_settings,
    run_command,
)
from memory_bridge.core.errors import ProxyError

T = TypeVar("T")
_CHUNK = 256 * 1024

TokenOption = Annotated[int, typer.Option("--token", min=1, help="The token's id.")]


def register(cli: typer.Typer) -> None:
    cli.command("export")(export_command)
    cli.command("import")(import_command)


def export_command(
    token: TokenOption,
    include: Annotated[
        str,
        typer.Option(
            help="Content classes, comma-separated: curated, longterm, sessions (the raw "
            "conversation history). None: the header alone."
        ),
    ] = "",
    mask: Annotated[
        bool, typer.Option(help="Scrub e-mail addresses, phone and card numbers, credentials.")
    ] = False,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="The file to write (default: stdout).")
    ] = None,
    url: UrlOption = None,
    admin_token_file: TokenFileOption = None,
) -> None:
    """Export a token's memory events as NDJSON (a header line, then one line per event)."""
    try:
        with _sink(output) as sink:
            lines = _run(
                url, admin_token_file, lambda target: target.export(token, include, mask, sink)
            )
    except typer.Exit:
        if output is not None:
            output.unlink(missing_ok=True)  # no half an export left behind
        raise
    if output is not None:
        typer.echo(f"Token {token}: {lines - 1} event(s) written to {output}.", err=True)


def import_command(
    file: Annotated[str, typer.Argument(help="An export's NDJSON file, or - for stdin.")],
    token: TokenOption,
    url: UrlOption = None,
    admin_token_file: TokenFileOption = None,
) -> None:
    """Import an export into a token: all or nothing, idempotent (a second run skips all)."""
    result = _run(url, admin_token_file, lambda target: target.import_(token, file))
    jobs = ", ".join(f"{n} {name}" for name, n in result["jobs"].items()) or "none"
    typer.echo(
        f"Token {token}: {result['imported']} event(s) imported, {result['skipped']} skipped "
        f"(already there); index jobs: {jobs}."
    )


# ---- where the work happens ----------------------------------------------------------------


class _Local:
    """The local database, through the same code as the admin API."""

    def __init__(self, runtime: Any) -> None:
        self._runtime = runtime

    async def export(self, token_id: int, include: str, mask: bool, sink: IO[bytes]) -> int:
        from memory_bridge.lifecycle.export import export_lines, start_export
        from memory_bridge.lifecycle.transfer import UnknownClass, install_id, parse_classes

        try:
            classes = parse_classes(include)
        except UnknownClass as exc:
            raise CliError(str(exc)) from None
        runtime = self._runtime
        if await runtime.tokens.get(token_id) is None:
            raise CliError(f"No token with id {token_id}.")
        install = install_id(runtime.settings.memory_bridge_data_dir)
        export = await start_export(
            runtime.db, runtime.audit, token_id, classes, mask=mask, install=install
        )
        lines = 0
        async for chunk in export_lines(runtime.db, export):
            sink.write(chunk)
            lines += chunk.count(b"\n")
        return lines

    async def import_(self, token_id: int, file: str) -> dict[str, Any]:
        from memory_bridge.lifecycle.import_lines import ImportBounds, stage
        from memory_bridge.lifecycle.importer import import_staged

        runtime = self._runtime
        if await runtime.tokens.get(token_id) is None:
            raise CliError(f"No token with id {token_id}.")
        staged = await stage(
            _chunks(file),
            runtime.settings.memory_bridge_data_dir / "imports",
            ImportBounds.of(runtime.settings),
        )
        try:
            return (await import_staged(runtime, token_id, staged)).as_json()
        finally:
            staged.discard()


class _Remote:
    def __init__(self, client: httpx.AsyncClient) -> None:
        self._client = client

    async def export(self, token_id: int, include: str, mask: bool, sink: IO[bytes]) -> int:
        params = {"include": include, "mask": str(mask).lower()}
        async with self._client.stream("GET", f"/tokens/{token_id}/export", params=params) as r:
            if not r.is_success:
                await r.aread()
                raise _remote_error(r)
            lines = 0
            async for chunk in r.aiter_bytes():
                sink.write(chunk)
                lines += chunk.count(b"\n")
        return lines

    async def import_(self, token_id: int, file: str) -> dict[str, Any]:
        reply = await self._client.post(
            f"/tokens/{token_id}/import",
            content=_chunks(file),
            headers={"Content-Type": "application/x-ndjson"},
        )
        if not reply.is_success:
            raise _remote_error(reply)
        result: dict[str, Any] = reply.json()
        return result


def _remote_error(reply: httpx.Response) -> ProxyError:
    try:
        error = reply.json()["error"]
        return ProxyError(reply.status_code, str(error["type"]), str(error["message"]))
    except (ValueError, KeyError, TypeError):
        return ProxyError(
            reply.status_code, "api_error", f"the server answered HTTP {reply.status_code}"
        )


async def _chunks(file: str) -> AsyncIterator[bytes]:
    """The file's bytes in chunks, read off the event loop (a file of any size, never whole)."""
    handle = sys.stdin.buffer if file == "-" else await asyncio.to_thread(Path(file).open, "rb")
    try:
        while chunk := await asyncio.to_thread(handle.read, _CHUNK):
            yield chunk
    finally:
        if handle is not sys.stdin.buffer:
            handle.close()


def _sink(output: Path | None) -> AbstractContextManager[IO[bytes]]:
    if output is None:
        return nullcontext(sys.stdout.buffer)
    # Owner-only from the start: an export is the token's memory, maybe its raw history.
    fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    return os.fdopen(fd, "wb")


def _run(url: str | None, token_file: Path | None, work: Callable[[Any], Awaitable[T]]) -> T:
    async def main() -> T:
        if url:
            headers = {"Authorization": f"Bearer {admin_token_from(token_file)}"}
            async with httpx.AsyncClient(
                base_url=url.rstrip("/") + "/v1/admin",
                headers=headers,
                timeout=httpx.Timeout(600.0, connect=10.0),
            ) as client:
                return await work(_Remote(client))
        from memory_bridge.sources.services import open_memory_services

        runtime = await open_memory_services(initialised_settings())
        try:
            return await work(_Local(runtime))
        finally:
            await runtime.close()

    return run_command(main, url)
