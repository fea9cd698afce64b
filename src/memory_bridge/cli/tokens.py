"""`memory-bridge token ...` and `memory-bridge curated ...`: the admin API from the shell.

By default the commands work on the local database (the data directory `memory-bridge init`
made), through the same code as the admin API (`token_admin`): a config is checked the same
way, a secret shown once. With `--url` they talk to a running server's admin API instead,
with the admin token from `--admin-token-file`, `MEMORY_BRIDGE_ADMIN_TOKEN`, or the
`admin-token` file `scripts/run.sh` keeps in the data directory.

A running server sees a token made locally at once (it reads unknown tokens from the database);
a rotation, deletion or curated edit made locally reaches it within TOKEN_CACHE_TTL seconds.
`token delete --purge` needs the server stopped on the embedded vector store (or `--url`).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any, Protocol, TypeVar

import typer

from memory_bridge.cli.common import (
    TokenFileOption,
    UrlOption,
    admin_token_from,
    fail,
    initialised_settings,
    run_command,
)
from memory_bridge.settings import Settings

T = TypeVar("T")
token_app = typer.Typer(
    no_args_is_help=True, help="Service tokens: create, list, show, rotate, delete."
)
curated_app = typer.Typer(
    no_args_is_help=True, help="Curated documents (MEMORY.md, USER.md): put, get, delete."
)

JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON.")]
TokenIdArg = Annotated[int, typer.Argument(min=1, help="The token's id.")]
KindArg = Annotated[str, typer.Argument(help="`memory` (MEMORY.md) or `user` (USER.md).")]
UserOption = Annotated[str, typer.Option(help="An end user's USER.md (default: token-wide).")]


def register(cli: typer.Typer) -> None:
    cli.add_typer(token_app, name="token")
    cli.add_typer(curated_app, name="curated")


class Admin(Protocol):
    """What the commands need; the local database or a server's admin API provides it."""

    async def create(self, body: dict[str, Any], validate: bool) -> dict[str, Any]: ...
    async def list(self) -> list[dict[str, Any]]: ...
    async def show(self, token_id: int) -> dict[str, Any]: ...
    async def rotate(self, token_id: int) -> str: ...
    async def delete(self, token_id: int, purge: bool) -> None: ...
    async def curated_put(self, token_id: int, kind: str, user: str, text: str) -> None: ...
    async def curated_get(self, token_id: int, kind: str, user: str) -> str: ...
    async def curated_delete(self, token_id: int, kind: str, user: str) -> None: ...


# ---- the commands --------------------------------------------------------------------------


@token_app.command("create")
def token_create(
    name: Annotated[str, typer.Option(help="A name for the token (your agent's).")],
    llm_base_url: Annotated[
        str, typer.Option(help="Your LLM's OpenAI-compatible API, e.g. https://api.openai.com/v1.")
    ],
    llm_api_key: Annotated[
        str | None,
        typer.Option(envvar="MEMORY_BRIDGE_LLM_API_KEY", help="Your LLM's API key (kept here)."),
    ] = None,
    config: Annotated[
        str | None,
        typer.Option(help="More config fields as a JSON object, or @file (docs/configuration.md)."),
    ] = None,
    validate: Annotated[
        bool, typer.Option(help="Check that the long-term memory settings can work.")
    ] = True,
    url: UrlOption = None,
    admin_token_file: TokenFileOption = None,
    as_json: JsonOption = False,
) -> None:
    """Register your LLM: a service token whose secret is printed once. Use the secret as the
    API key of an OpenAI client whose base_url is this proxy's /v1."""
    body: dict[str, Any] = _json_object(config) if config else {}
    body.update(name=name, llm_base_url=llm_base_url)
    if llm_api_key:
        body["llm_api_key"] = llm_api_key
    created = _run(url, admin_token_file, lambda admin: admin.create(body, validate))
    if as_json:
        _print_json(created)
        return
    base = (url.rstrip("/") if url else _local_url()) + "/v1"
    typer.echo(f"Token {created['id']} created ({created['name']}).")
    typer.echo("Its secret, shown this once (only a hash of it is stored):")
    typer.echo(created["token"])
    typer.echo(f"Use it as the API key of an OpenAI client with base_url {base}")


@token_app.command("list")
def token_list(
    url: UrlOption = None, admin_token_file: TokenFileOption = None, as_json: JsonOption = False
) -> None:
    """Every service token (secrets masked)."""
    tokens = _run(url, admin_token_file, lambda admin: admin.list())
    if as_json:
        _print_json(tokens)
        return
    if not tokens:
        typer.echo("No service tokens yet: `memory-bridge token create --help`.")
    for t in tokens:
        config = t.get("config") or {}
        state = "usable" if t["usable"] else "UNUSABLE"
        typer.echo(f"{t['id']:>4}  {t['name']:<24} {state:<9} {config.get('llm_base_url', '')}")


@token_app.command("show")
def token_show(
    token_id: TokenIdArg, url: UrlOption = None, admin_token_file: TokenFileOption = None
) -> None:
    """One token's config (secrets masked) and the state of each memory layer, as JSON."""
    _print_json(_run(url, admin_token_file, lambda admin: admin.show(token_id)))


@token_app.command("rotate")
def token_rotate(
    token_id: TokenIdArg, url: UrlOption = None, admin_token_file: TokenFileOption = None
) -> None:
    """A new secret for the token (printed once); the old one stops working. Its memories stay."""
    secret = _run(url, admin_token_file, lambda admin: admin.rotate(token_id))
    typer.echo(f"New secret of token {token_id}, shown this once (the old one no longer works):")
    typer.echo(secret)


@token_app.command("delete")
def token_delete(
    token_id: TokenIdArg,
    purge: Annotated[
        bool, typer.Option(help="Also delete its history, documents, memories and events.")
    ] = False,
    url: UrlOption = None,
    admin_token_file: TokenFileOption = None,
) -> None:
    """Delete a token (its requests are refused from then on)."""
    _run(url, admin_token_file, lambda admin: admin.delete(token_id, purge))
    typer.echo(f"Token {token_id} deleted{' and purged' if purge else ''}.")


@curated_app.command("put")
def curated_put(
    token_id: TokenIdArg,
    kind: KindArg,
    file: Annotated[str, typer.Argument(help="A markdown file, or - for standard input.")] = "-",
    user: UserOption = "",
    url: UrlOption = None,
    admin_token_file: TokenFileOption = None,
) -> None:
    """Replace a curated document with the file's content."""
    raw = sys.stdin.buffer.read() if file == "-" else Path(file).read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise fail("the document must be UTF-8 text") from None
    _run(url, admin_token_file, lambda admin: admin.curated_put(token_id, kind, user, text))
    typer.echo(f"{_doc(kind, user)} of token {token_id} replaced ({len(raw)} bytes).")


@curated_app.command("get")
def curated_get(
    token_id: TokenIdArg,
    kind: KindArg,
    user: UserOption = "",
    url: UrlOption = None,
    admin_token_file: TokenFileOption = None,
) -> None:
    """Print a curated document (nothing if none was written)."""
    text = _run(url, admin_token_file, lambda admin: admin.curated_get(token_id, kind, user))
    typer.echo(text, nl=not text.endswith("\n") and bool(text))


@curated_app.command("delete")
def curated_delete(
    token_id: TokenIdArg,
    kind: KindArg,
    user: UserOption = "",
    url: UrlOption = None,
    admin_token_file: TokenFileOption = None,
) -> None:
    """Delete a curated document."""
    _run(url, admin_token_file, lambda admin: admin.curated_delete(token_id, kind, user))
    typer.echo(f"{_doc(kind, user)} of token {token_id} deleted.")


# ---- plumbing ------------------------------------------------------------------------------


def _doc(kind: str, user: str) -> str:
    name = "MEMORY.md" if kind == "memory" else "USER.md"
    return f"{name} of end user {user!r}" if user else name


def _print_json(value: object) -> None:
    typer.echo(json.dumps(value, indent=2, ensure_ascii=False))


def _json_object(text: str) -> dict[str, Any]:
    if text.startswith("@"):
        text = Path(text[1:]).read_text()
    try:
        value = json.loads(text)
    except ValueError:
        raise fail("--config is not valid JSON") from None
    if not isinstance(value, dict):
        raise fail("--config must be a JSON object")
    return value


def _local_url() -> str:
    settings = Settings()
    return f"http://{settings.memory_bridge_host}:{settings.memory_bridge_port}"


def _run(url: str | None, token_file: Path | None, work: Callable[[Admin], Awaitable[T]]) -> T:
    async def main() -> T:
        if url:
            from memory_bridge.cli.backends import RemoteAdmin

            async with RemoteAdmin(url, admin_token_from(token_file)) as remote:
                return await work(remote)
        from memory_bridge.cli.backends import LocalAdmin

        async with LocalAdmin(initialised_settings()) as local:
            return await work(local)

    return run_command(main, url)
