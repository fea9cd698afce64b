"""What every `memory-bridge` command shares: the options naming a server and its admin
token, the error a command fails with, and the marks `init` leaves in the data directory."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, TypeVar

import httpx
import typer

from memory_bridge.core.errors import ProxyError
from memory_bridge.settings import Settings

T = TypeVar("T")
ADMIN_TOKEN_ENV = "MEMORY_BRIDGE_ADMIN_TOKEN"
# `init` writes the first while it runs and the second when it is done.
SENTINEL_RUNNING = ".initializing"
SENTINEL_DONE = ".initialized"

UrlOption = Annotated[
    str | None,
    typer.Option(
        "--url",
        envvar="MEMORY_BRIDGE_URL",
        help="A running server (e.g. http://127.0.0.1:8000) instead of the local database.",
    ),
]
TokenFileOption = Annotated[
    Path | None,
    typer.Option(help=f"With --url: the admin token's file (else ${ADMIN_TOKEN_ENV})."),
]


class CliError(Exception):
    pass


def fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(1)


def run_command(main: Callable[[], Awaitable[T]], url: str | None) -> T:
    """Run one admin command's coroutine; what it may raise becomes a one-line error and
    exit code 1 (never a traceback: an exception's text could be long or carry a path)."""

    async def guarded() -> T:
        return await main()

    try:
        return asyncio.run(guarded())
    except (ProxyError, CliError) as exc:
        raise fail(str(exc)) from None
    except httpx.HTTPError as exc:
        raise fail(f"could not reach {url} ({type(exc).__name__})") from None
    except OSError as exc:
        raise fail(f"{exc.strerror or type(exc).__name__}: {exc.filename or ''}") from None


def admin_token_from(token_file: Path | None) -> str:
    if token_file is not None:
        return token_file.read_text().strip()
    if secret := os.environ.get(ADMIN_TOKEN_ENV, "").strip():
        return secret
    default = Settings().memory_bridge_data_dir / "admin-token"
    if default.is_file():
        return default.read_text().strip()
    raise fail(f"--url needs the admin token: --admin-token-file or ${ADMIN_TOKEN_ENV}")


def initialised_settings() -> Settings:
    settings = Settings()
    data = settings.memory_bridge_data_dir
    if (data / SENTINEL_RUNNING).exists() or not (data / SENTINEL_DONE).exists():
        raise CliError(
            f"{data.resolve()} is not initialised: run `memory-bridge init` first, or point "
            "at the install (--home or $MEMORY_BRIDGE_HOME, or --data-dir)."
        )
    return settings
