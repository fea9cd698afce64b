"""Service and admin tokens in the database, with a short in-process cache for auth.

Only a digest of each secret is stored. The provider keys inside a config are encrypted here,
at the store's boundary (`_dump` / `_load_config`), with the cipher the store is given: the
rest of the process only ever sees plain `TokenConfig`s, the database only sealed secrets.
A row whose config no longer validates, or whose secrets the current key cannot decrypt,
makes that token unusable (auth answers "unknown") rather than crashing anything.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, bindparam, delete, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from memory_bridge.storage.db import Database
from memory_bridge.storage.tables import tokens
from memory_bridge.tenancy.config import TokenConfig, TokenConfigError, validate_config
from memory_bridge.tenancy.encryption import SecretCipher, UndecryptableSecret
from memory_bridge.tenancy.secrets import ADMIN_PREFIX, digest, digests_match, new_secret

log = logging.getLogger(__name__)
_CACHE_LIMIT = 10_000
_AUTHENTICATE = select(tokens.c.id, tokens.c.is_admin, tokens.c.config, tokens.c.secret_hash).where(
    tokens.c.secret_hash == bindparam("key")
)
_CONFIG = select(tokens.c.config).where(
    tokens.c.id == bindparam("token_id"), tokens.c.is_admin.is_(False)
)


@dataclass(frozen=True, slots=True)
class Principal:
    token_id: int
    is_admin: bool
    config: TokenConfig | None


@dataclass(frozen=True, slots=True)
class TokenRecord:
    id: int
    name: str
    is_admin: bool
    config: TokenConfig | None
    config_error: str | None
    created_at: datetime | None
    updated_at: datetime | None


class TokenStore:
    def __init__(
        self, sessions: Database, cache_ttl: float, cipher: SecretCipher | None = None
    ) -> None:
        """Without a cipher, a key that lives as long as this store: nothing is ever stored in
        clear, and nothing it stored can be read after a restart (fine for tests only)."""
        self._sessions = sessions
        self._ttl = cache_ttl
        self._cipher = cipher or SecretCipher.ephemeral()
        self._cache: dict[str, tuple[float, Principal]] = {}
        self._configs: dict[int, tuple[float, TokenConfig | None]] = {}
        self._listeners: list[Callable[[int], None]] = []

    @classmethod
    async def open(cls, sessions: Database, cache_ttl: float, cipher: SecretCipher) -> TokenStore:
        """The store, once rows written in clear by older versions are encrypted."""
        store = cls(sessions, cache_ttl, cipher)
        await store.seal_clear_configs()
        return store

    def on_change(self, listener: Callable[[int], None]) -> None:
        """Call `listener(token_id)` whenever a token's config or secret changes or it goes."""
        self._listeners.append(listener)

    async def authenticate(self, secret: str) -> Principal | None:
        key = digest(secret)
        hit = self._cache.get(key)
        now = time.monotonic()
        if hit is not None and hit[0] > now:
            return hit[1]

        def read(conn: Connection) -> Any:
            return conn.execute(_AUTHENTICATE, {"key": key}).first()

        row = await self._sessions.run(read)
        if row is None or not digests_match(row.secret_hash, key):
            return None
        principal: Principal
        if row.is_admin:
            principal = Principal(row.id, True, None)
        else:
            config, error = _load_config(row.config, self._cipher)
            if config is None:
                log.warning("token %d is unusable: %s", row.id, error)
                return None
            principal = Principal(row.id, False, config)
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        self._cache[key] = (now + self._ttl, principal)
        return principal

    async def current_config(self, token_id: int) -> TokenConfig | None:
        """A service token's usable config, or None (gone, or unusable): what an after-turn
        job works with. Cached as authentication is (`cache_ttl`, dropped at once on a change
        made through this store): a turn's job read it through an ORM session, a cost on the
        serving process's CPU for every turn."""
        now = time.monotonic()
        hit = self._configs.get(token_id)
        if hit is not None and hit[0] > now:
            return hit[1]

        def read(conn: Connection) -> Any:
            return conn.execute(_CONFIG, {"token_id": token_id}).first()

        row = await self._sessions.run(read)
        config = None if row is None else _load_config(row.config, self._cipher)[0]
        if len(self._configs) >= _CACHE_LIMIT:
            self._configs.clear()
        self._configs[token_id] = (now + self._ttl, config)
        return config

    async def has_admin(self) -> bool:
        async with self._sessions() as s:
            count = await s.scalar(
                select(func.count()).select_from(tokens).where(tokens.c.is_admin.is_(True))
            )
        return bool(count)

    async def create_admin(self) -> str:
        secret = new_secret(ADMIN_PREFIX)
        async with self._sessions.begin() as s:
            await s.execute(
                insert(tokens).values(
                    name="admin", is_admin=True, secret_hash=digest(secret), config=None
                )
            )
        return secret

    async def rotate_admin(self) -> str:
        """Replace every admin secret with one new one (recovery when the old one is lost)."""
        secret = new_secret(ADMIN_PREFIX)
        async with self._sessions.begin() as s:
            await s.execute(delete(tokens).where(tokens.c.is_admin.is_(True)))
            await s.execute(
                insert(tokens).values(
                    name="admin", is_admin=True, secret_hash=digest(secret), config=None
                )
            )
        self._cache.clear()
        self._configs.clear()
        return secret

    async def create(self, config: TokenConfig) -> tuple[TokenRecord, str]:
        secret = new_secret()
        async with self._sessions.begin() as s:
            result = await s.execute(
                insert(tokens)
                .values(
                    name=config.name,
                    is_admin=False,
                    secret_hash=digest(secret),
                    config=_dump(config, self._cipher),
                )
                .returning(tokens.c.id)
            )
            token_id = int(result.scalar_one())
        record = await self.get(token_id)
        assert record is not None
        return record, secret

    async def get(self, token_id: int) -> TokenRecord | None:
        async with self._sessions() as s:
            row = (
                await s.execute(
                    select(tokens).where(tokens.c.id == token_id, tokens.c.is_admin.is_(False))
                )
            ).first()
        return None if row is None else _record(row, self._cipher)

    async def list(self, limit: int | None = None, offset: int = 0) -> list[TokenRecord]:
        """The service tokens by id; `limit`/`offset`: one page of them."""
        query = select(tokens).where(tokens.c.is_admin.is_(False)).order_by(tokens.c.id)
        if limit is not None:
            query = query.limit(limit).offset(offset)
        async with self._sessions() as s:
            rows = (await s.execute(query)).all()
        return [_record(r, self._cipher) for r in rows]

    async def update(self, token_id: int, config: TokenConfig) -> TokenRecord | None:
        async with self._sessions.begin() as s:
            result = await s.execute(
                update(tokens)
                .where(tokens.c.id == token_id, tokens.c.is_admin.is_(False))
                .values(name=config.name, config=_dump(config, self._cipher), updated_at=func.now())
            )
        if not result.rowcount:  # type: ignore[attr-defined]
            return None
        self._changed(token_id)
        return await self.get(token_id)

    async def rotate(self, token_id: int) -> str | None:
        secret = new_secret()
        async with self._sessions.begin() as s:
            result = await s.execute(
                update(tokens)
                .where(tokens.c.id == token_id, tokens.c.is_admin.is_(False))
                .values(secret_hash=digest(secret), updated_at=func.now())
            )
        if not result.rowcount:  # type: ignore[attr-defined]
            return None
        self._changed(token_id)
        return secret

    async def delete(self, token_id: int) -> bool:
        async with self._sessions.begin() as s:
            result = await s.execute(
                delete(tokens).where(tokens.c.id == token_id, tokens.c.is_admin.is_(False))
            )
        if not result.rowcount:  # type: ignore[attr-defined]
            return False
        self._changed(token_id)
        return True

    async def seal_clear_configs(self) -> int:
        """Encrypt the secrets rows from older versions hold in clear; return how many rows.

        Rows the current key cannot decrypt are named in the log (they stay unusable until
        the right key is configured); nothing else about them changes.
        """
        changed = 0
        async with self._sessions.begin() as s:
            for token_id, data in await _stored_configs(s):
                sealed = self._cipher.seal_clear(data)
                if sealed != data:
                    await _store_config(s, token_id, sealed)
                    changed += 1
                try:
                    self._cipher.open(sealed)
                except UndecryptableSecret as exc:
                    log.error("token %d is unusable: %s", token_id, _undecryptable(exc))
        if changed:
            log.warning(
                "encrypted the provider keys stored in clear in %d token config(s)", changed
            )
        return changed

    async def reseal_configs(self) -> tuple[int, tuple[int, ...]]:
        """Re-encrypt every config's secrets with the first key (key rotation), in one
        transaction; return how many rows were rewritten and the ids none of the keys opens."""
        done = 0
        failed: tuple[int, ...] = ()
        async with self._sessions.begin() as s:
            for token_id, data in await _stored_configs(s):
                try:
                    await _store_config(s, token_id, self._cipher.reseal(data))
                    done += 1
                except UndecryptableSecret:
                    failed += (token_id,)
        self._cache.clear()
        self._configs.clear()
        return done, failed

    def _changed(self, token_id: int) -> None:
        self._configs.pop(token_id, None)
        for key, (_, principal) in list(self._cache.items()):
            if principal.token_id == token_id:
                del self._cache[key]
        for listener in self._listeners:
            listener(token_id)


async def _stored_configs(s: AsyncSession) -> list[tuple[int, Any]]:
    """Every service token's stored config as parsed JSON (unparseable ones are skipped)."""
    rows = await s.execute(
        select(tokens.c.id, tokens.c.config).where(
            tokens.c.is_admin.is_(False), tokens.c.config.is_not(None)
        )
    )
    out: list[tuple[int, Any]] = []
    for token_id, raw in rows:
        try:
            out.append((token_id, json.loads(raw)))
        except ValueError:
            continue  # already unusable, and reported as such: nothing to encrypt in it
    return out


async def _store_config(s: AsyncSession, token_id: int, data: Any) -> None:
    # updated_at is left alone: the configuration did not change, only its encryption.
    await s.execute(update(tokens).where(tokens.c.id == token_id).values(config=_json(data)))


def _json(data: Any) -> str:
    return json.dumps(data, separators=(",", ":"))


def _dump(config: TokenConfig, cipher: SecretCipher) -> str:
    return _json(cipher.seal(config.model_dump(exclude_none=True)))


def _load_config(raw: str | None, cipher: SecretCipher) -> tuple[TokenConfig | None, str | None]:
    try:
        return validate_config(cipher.open(json.loads(raw or "null"))), None
    except UndecryptableSecret as exc:
        return None, _undecryptable(exc)
    except (TokenConfigError, ValueError) as exc:
        field = exc.field if isinstance(exc, TokenConfigError) else "config"
        return None, f"invalid field {field}"


def _undecryptable(exc: UndecryptableSecret) -> str:
    # The token's id goes with it in every log line; the value never does.
    return f"its stored provider keys {exc} (MEMORY_BRIDGE_SECRET_KEY or the key file)"


def _record(row: Any, cipher: SecretCipher) -> TokenRecord:
    config, error = _load_config(row.config, cipher)
    return TokenRecord(
        id=row.id,
        name=row.name,
        is_admin=row.is_admin,
        config=config,
        config_error=error,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )
