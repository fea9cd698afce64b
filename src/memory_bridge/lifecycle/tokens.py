"""Token administration, shared by the admin API (`http/admin_routes.py`) and the
`memory-bridge token` commands working on the local database (`cli_admin.py`).

Both go through the same steps, so a token made either way is checked the same: its config
validated (422 naming the field), its long-term memory checked for whether it can work here
(`sources.longterm.check`, skipped with `validate=False`), its secret shown once.
Errors are `ProxyError`s; the HTTP edge renders them, the CLI prints their message.
"""

from __future__ import annotations

import logging
from typing import Any

from memory_bridge.core.errors import ProxyError, invalid_request
from memory_bridge.core.timestamps import iso_utc
from memory_bridge.lifecycle.purge import purge_token
from memory_bridge.lifecycle.reembed import reembed_if_changed
from memory_bridge.sources.base import MemorySource
from memory_bridge.sources.longterm.check import changes_longterm, check_embedder, check_longterm
from memory_bridge.sources.services import MemoryServices
from memory_bridge.storage.tokens import TokenRecord
from memory_bridge.storage.traces import TraceStore
from memory_bridge.tenancy.config import TokenConfig, TokenConfigError, merge_patch, validate_config
from memory_bridge.tenancy.memory_config import PASSTHROUGH_STATUS
from memory_bridge.tenancy.secrets import mask_secrets

log = logging.getLogger(__name__)


def not_found(token_id: int) -> ProxyError:
    return ProxyError(404, "not_found_error", f"No token with id {token_id}.")


def detail(record: TokenRecord, sources: tuple[MemorySource, ...]) -> dict[str, Any]:
    """A token as the admin API shows it: every secret masked, each memory layer's state."""
    out: dict[str, Any] = {
        "id": record.id,
        "name": record.name,
        "created_at": iso_utc(record.created_at),
        "updated_at": iso_utc(record.updated_at),
    }
    if record.config is None:
        out["config"] = None
        out["config_error"] = record.config_error
        out["usable"] = False
    else:
        out["config"] = mask_secrets(record.config.model_dump(exclude_none=True))
        out["usable"] = True
        off = record.config.memory_config.passthrough
        out["memory_layers"] = {
            s.name: PASSTHROUGH_STATUS if off else s.describe(record.config) for s in sources
        }
    return out


async def _checked(
    runtime: MemoryServices, old: TokenConfig | None, new: TokenConfig, validate: bool
) -> None:
    """Refuse (422) a config whose long-term memory cannot work here. Only when it changes
    what that layer talks to; `validate=False` skips every check beyond the schema."""
    if not validate:
        return
    try:
        if old is None or _embedder(old) != _embedder(new):
            check_embedder(new)
        if changes_longterm(old, new):
            await check_longterm(new, runtime.client)
    except TokenConfigError as exc:
        raise invalid_request(str(exc)) from None


def _embedder(config: TokenConfig) -> tuple[object, ...]:
    return config.embed_provider, config.embed_dims, config.embed_body


async def create_token(
    runtime: MemoryServices, body: object, *, validate: bool = True
) -> tuple[TokenRecord, str]:
    try:
        config = validate_config(body)
    except TokenConfigError as exc:
        raise invalid_request(str(exc)) from None
    await _checked(runtime, None, config, validate)
    record, secret = await runtime.tokens.create(config)
    log.info("token %d created (%s)", record.id, record.name)
    runtime.degraded.check(record.id, config.memory_config)
    return record, secret


async def update_token(
    runtime: MemoryServices, token_id: int, patch: object, *, validate: bool = True
) -> TokenRecord:
    store = runtime.tokens
    record = await store.get(token_id)
    if record is None:
        raise not_found(token_id)
    try:
        # A row whose stored config went bad is repaired by sending a complete config.
        if record.config is None:
            config = validate_config(patch)
        else:
            config = merge_patch(record.config, patch)
    except TokenConfigError as exc:
        raise invalid_request(str(exc)) from None
    await _checked(runtime, record.config, config, validate)
    # Before the update: recall must never see the new embedder without the re-embed's
    # generation (which keeps it on the old vectors until they are re-made).
    await reembed_if_changed(runtime, token_id, record.config, config)
    updated = await store.update(token_id, config)
    if updated is None:
        raise not_found(token_id)
    log.info("token %d updated", token_id)
    return updated


async def delete_token(
    runtime: MemoryServices, token_id: int, *, purge: bool, traces: TraceStore | None = None
) -> None:
    """Delete a token; with `purge`, every memory layer goes first and the row last, so a
    purge that fails midway can be retried (`lifecycle.purge`)."""
    if purge:
        if not await purge_token(runtime, token_id, traces):
            raise not_found(token_id)
    elif not await runtime.tokens.delete(token_id):
        raise not_found(token_id)
    log.info("token %d deleted%s", token_id, " and purged" if purge else "")


async def rotate_token(runtime: MemoryServices, token_id: int) -> str:
    secret = await runtime.tokens.rotate(token_id)
    if secret is None:
        raise not_found(token_id)
    log.info("token %d rotated", token_id)
    return secret
