"""The `memory-bridge` command: init, serve, admin-token recovery, secret-key rotation; the
token and curated-document commands live in `cli_admin`."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Annotated

import typer

from memory_bridge.cli.common import SENTINEL_DONE, SENTINEL_RUNNING, fail
from memory_bridge.cli.home import HOME_ENV, NoHome, use_home
from memory_bridge.cli.rebuild import register as register_rebuild
from memory_bridge.cli.tokens import register
from memory_bridge.cli.transfer import register as register_lifecycle
from memory_bridge.settings import Settings
from memory_bridge.tenancy.private_files import private_dir

cli = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)


@cli.callback()
def _install(
    home: Annotated[
        Path | None,
        typer.Option(
            "--home",
            envvar=HOME_ENV,
            help="The install's folder (its .env, data/ and templates/): run from anywhere.",
        ),
    ] = None,
    data_dir: Annotated[
        Path | None, typer.Option("--data-dir", help="The data folder (MEMORY_BRIDGE_DATA_DIR).")
    ] = None,
) -> None:
    try:
        use_home(home, data_dir)
    except NoHome as exc:
        raise fail(str(exc)) from None


register(cli)  # memory-bridge token ..., memory-bridge curated ...
register_lifecycle(cli)  # memory-bridge export, import
register_rebuild(cli)  # memory-bridge rebuild


def _data_dir(settings: Settings) -> Path:
    return settings.memory_bridge_data_dir


def _fail(message: str, code: int = 1) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


@cli.command()
def init(
    admin_token_file: Annotated[
        Path | None, typer.Option(help="Also write the admin token to this file (mode 0600).")
    ] = None,
) -> None:
    """Create the data directory (0700), the database schema, the secret key file (0600) and,
    once, an admin token. Re-running it tightens loose permissions and encrypts provider keys
    left in clear by older versions."""
    settings = Settings()
    data = _data_dir(settings)
    private_dir(data)
    running = data / SENTINEL_RUNNING
    if running.exists():
        typer.echo("A previous `memory-bridge init` was interrupted; running it again.")
    running.touch()
    secret = asyncio.run(initialise(settings))
    if secret is None:
        typer.echo("An admin token already exists; no new one was created.")
        typer.echo("Lost it? `memory-bridge rotate-admin-token` replaces it.")
    else:
        typer.echo(f"Admin token: {secret}")
        if admin_token_file is not None:
            _write_private(admin_token_file, secret)
    running.replace(data / SENTINEL_DONE)
    if not settings.memory_bridge_secret_key.strip():
        key_file = settings.resolved_secret_key_path
        typer.echo(f"Secret key file: {key_file} (back it up, apart from the database).")
    typer.echo(f"Initialised {data.resolve()}.")


@cli.command("rotate-admin-token")
def rotate_admin_token(
    admin_token_file: Annotated[
        Path | None, typer.Option(help="Also write the admin token to this file (mode 0600).")
    ] = None,
) -> None:
    """Replace the admin token (the old one stops working) and print the new one once."""
    settings = Settings()
    _check_initialised(settings)
    secret = asyncio.run(_rotate_admin(settings))
    typer.echo(f"Admin token: {secret}")
    if admin_token_file is not None:
        _write_private(admin_token_file, secret)


@cli.command("rotate-secret-key")
def rotate_secret_key() -> None:
    """Re-encrypt every token config's provider keys with a new secret key.

    Stop the server (and workers) first. With the key file, a new key is put first in it,
    every config is re-encrypted with it, then the old key is removed from the file. With
    MEMORY_BRIDGE_SECRET_KEY, put a new key first yourself (`new,old`), run this, then remove
    the old key from the variable.
    """
    from memory_bridge.tenancy.encryption import SecretKeyError

    settings = Settings()
    _check_initialised(settings)
    from_env = bool(settings.memory_bridge_secret_key.strip())
    try:
        done, failed = asyncio.run(_rotate_secret_key(settings))
    except SecretKeyError as exc:
        raise _fail(str(exc)) from None
    typer.echo(f"Re-encrypted the provider keys of {done} token config(s).")
    if failed:
        ids = ", ".join(map(str, failed))
        typer.echo(
            f"Token(s) {ids}: no key decrypts their stored provider keys; left as they were "
            "(unusable until their config is replaced with a PATCH)."
        )
    if from_env:
        typer.echo("Now remove every key but the first from MEMORY_BRIDGE_SECRET_KEY.")
    else:
        typer.echo(f"The key file {settings.resolved_secret_key_path} holds the new key only.")


@cli.command()
def serve(
    host: Annotated[str | None, typer.Option(help="Default: MEMORY_BRIDGE_HOST.")] = None,
    port: Annotated[int | None, typer.Option(help="Default: MEMORY_BRIDGE_PORT.")] = None,
    worker: Annotated[
        bool, typer.Option(help="Also drain the job queue (--no-worker: serve only).")
    ] = True,
) -> None:
    """Run the proxy until SIGINT/SIGTERM; in-flight requests and queued jobs finish or go
    back to the queue."""
    import uvicorn

    from memory_bridge.context.template import TemplateError
    from memory_bridge.http.slow_heads import head_deadline_protocol
    from memory_bridge.server.app import create_app
    from memory_bridge.server.logs import configure_logging
    from memory_bridge.server.qdrant_managed import managed_qdrant
    from memory_bridge.server.qdrant_process import QdrantStartError

    settings = Settings()
    if not worker:
        settings = settings.model_copy(update={"serve_worker": False})
    _check_initialised(settings)
    configure_logging(settings.log_level, settings.log_format)
    try:
        app = create_app(settings)
    except TemplateError as exc:
        raise _fail(str(exc), 2) from None
    config = uvicorn.Config(
        app,
        host=host or settings.memory_bridge_host,
        port=settings.memory_bridge_port if port is None else port,
        log_config=None,
        lifespan="on",
        http=head_deadline_protocol(settings.header_read_timeout),
        timeout_keep_alive=settings.keep_alive_timeout,
        server_header=False,
        date_header=False,
        # The edge writes each request's access line (memory_bridge.access: route, status,
        # token id, timing); uvicorn's own would be a second, poorer line per request.
        access_log=False,
        timeout_graceful_shutdown=int(settings.background_drain_timeout),
    )
    try:
        # The proxy runs inside: on shutdown it drains first, then the Qdrant child stops.
        with managed_qdrant(settings):
            uvicorn.Server(config).run()
    except QdrantStartError as exc:
        raise _fail(str(exc), 3) from None


@cli.command("worker")
def worker_command() -> None:
    """Drain the job queue (memory writes after each turn) until SIGINT/SIGTERM. Any number
    of workers may share a PostgreSQL database; see docs/operations.md."""
    from memory_bridge.jobs.process import run_worker
    from memory_bridge.server.logs import configure_logging

    settings = Settings()
    _check_initialised(settings)
    configure_logging(settings.log_level, settings.log_format)
    asyncio.run(run_worker(settings))


def _check_initialised(settings: Settings) -> None:
    data = _data_dir(settings)
    if (data / SENTINEL_RUNNING).exists():
        raise _fail("`memory-bridge init` was interrupted; re-run `memory-bridge init`.")
    if not (data / SENTINEL_DONE).exists():
        raise _fail(f"{data} is not initialised; run `memory-bridge init` first.")


async def initialise(settings: Settings) -> str | None:
    """Schema, secret key and (once) the admin token; returns the admin secret if new."""
    from memory_bridge.storage.db import create_engine, create_schema, session_factory
    from memory_bridge.storage.tokens import TokenStore
    from memory_bridge.tenancy.encryption import load_cipher

    private_dir(_data_dir(settings))
    cipher = load_cipher(settings.memory_bridge_secret_key, settings.resolved_secret_key_path)
    engine = create_engine(settings.resolved_database_url)
    db = session_factory(engine)
    try:
        await create_schema(engine)
        store = await TokenStore.open(db, 0, cipher)
        if await store.has_admin():
            return None
        return await store.create_admin()
    finally:
        await db.close()
        await engine.dispose()


async def _rotate_admin(settings: Settings) -> str:
    from memory_bridge.storage.db import create_engine, create_schema, session_factory
    from memory_bridge.storage.tokens import TokenStore

    engine = create_engine(settings.resolved_database_url)
    try:
        await create_schema(engine)
        return await TokenStore(session_factory(engine), cache_ttl=0).rotate_admin()
    finally:
        await engine.dispose()


async def _rotate_secret_key(settings: Settings) -> tuple[int, tuple[int, ...]]:
    """Re-encrypt under the new first key; the key file keeps the old key until that is done,
    so an interruption leaves every row readable (run the command again)."""
    from memory_bridge.storage.db import create_engine, create_schema, session_factory
    from memory_bridge.storage.tokens import TokenStore
    from memory_bridge.tenancy.encryption import add_new_key, load_cipher, retire_old_keys

    env_keys, key_file = settings.memory_bridge_secret_key, settings.resolved_secret_key_path
    cipher = load_cipher(env_keys, key_file) if env_keys.strip() else add_new_key(key_file)
    engine = create_engine(settings.resolved_database_url)
    db = session_factory(engine)
    try:
        await create_schema(engine)
        result = await TokenStore(db, 0, cipher).reseal_configs()
    finally:
        await db.close()
        await engine.dispose()
    if not env_keys.strip():
        retire_old_keys(key_file)
    return result


def _write_private(path: Path, secret: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(secret + "\n")
    path.chmod(0o600)  # an existing file keeps its old mode through os.open


def main() -> None:
    cli()
