"""The two places `memory-bridge token|curated` can act on: the local database, through the
same code as the admin API, or a running server's admin API over HTTP."""

from __future__ import annotations

from types import TracebackType
from typing import Any, Self

import httpx

from memory_bridge.core.errors import ProxyError, invalid_request
from memory_bridge.events.curated import Kind
from memory_bridge.lifecycle import forget
from memory_bridge.lifecycle import tokens as token_admin
from memory_bridge.settings import Settings
from memory_bridge.sources.services import MemoryServices, open_memory_services

_KINDS: tuple[Kind, ...] = ("memory", "user")


class LocalAdmin:
    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._runtime: MemoryServices | None = None

    async def __aenter__(self) -> Self:
        self._runtime = await open_memory_services(self._settings)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._runtime is not None:
            await self._runtime.close()

    @property
    def runtime(self) -> MemoryServices:
        assert self._runtime is not None
        return self._runtime

    async def create(self, body: dict[str, Any], validate: bool) -> dict[str, Any]:
        record, secret = await token_admin.create_token(self.runtime, body, validate=validate)
        return {**token_admin.detail(record, self.runtime.sources), "token": secret}

    async def list(self) -> list[dict[str, Any]]:
        records = await self.runtime.tokens.list()
        return [token_admin.detail(r, self.runtime.sources) for r in records]

    async def show(self, token_id: int) -> dict[str, Any]:
        record = await self.runtime.tokens.get(token_id)
        if record is None:
            raise token_admin.not_found(token_id)
        return token_admin.detail(record, self.runtime.sources)

    async def rotate(self, token_id: int) -> str:
        return await token_admin.rotate_token(self.runtime, token_id)

    async def delete(self, token_id: int, purge: bool) -> None:
        await token_admin.delete_token(self.runtime, token_id, purge=purge)

    async def curated_put(self, token_id: int, kind: str, user: str, text: str) -> None:
        document = await self._document(token_id, kind, user)
        limit = self._settings.curated_max_bytes
        if len(text.encode()) > limit:
            raise invalid_request(f"Curated documents are limited to {limit} bytes.", 413)
        if "\x00" in text:
            raise invalid_request("The document must not contain NUL characters.")
        await self.runtime.curated.put(token_id, document, user, text)

    async def curated_get(self, token_id: int, kind: str, user: str) -> str:
        document = await self._document(token_id, kind, user)
        return await self.runtime.curated.get(token_id, document, user)

    async def curated_delete(self, token_id: int, kind: str, user: str) -> None:
        document = await self._document(token_id, kind, user)
        meta = {"source": "admin"}
        try:
            found = await forget.delete_curated(self.runtime, token_id, document, user, meta)
        finally:
            self.runtime.curated.forget(token_id)
        if not found:
            raise ProxyError(404, "not_found_error", f"Token {token_id} has no such document.")

    async def _document(self, token_id: int, kind: str, user: str) -> Kind:
        """The same rules as the admin API's curated routes."""
        await self.show(token_id)
        for known in _KINDS:
            if kind == known:
                if known == "memory" and user:
                    raise invalid_request(
                        "MEMORY.md is token-wide; 'user' applies to USER.md only."
                    )
                return known
        raise invalid_request("The document kind is `memory` or `user`.")


class RemoteAdmin:
    def __init__(self, url: str, admin_token: str) -> None:
        self._client = httpx.AsyncClient(
            base_url=url.rstrip("/") + "/v1/admin",
            headers={"Authorization": f"Bearer {admin_token}"},
            timeout=httpx.Timeout(60.0, connect=10.0),
        )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._client.aclose()

    async def _call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        reply = await self._client.request(method, path, **kwargs)
        if reply.is_success:
            return reply
        try:
            error = reply.json()["error"]
            raise ProxyError(reply.status_code, str(error["type"]), str(error["message"]))
        except (ValueError, KeyError, TypeError):
            raise ProxyError(
                reply.status_code, "api_error", f"the server answered HTTP {reply.status_code}"
            ) from None

    async def create(self, body: dict[str, Any], validate: bool) -> dict[str, Any]:
        params = {} if validate else {"validate": "false"}
        created: dict[str, Any] = (
            await self._call("POST", "/tokens", json=body, params=params)
        ).json()
        return created

    async def list(self) -> list[dict[str, Any]]:
        data: list[dict[str, Any]] = (await self._call("GET", "/tokens")).json()["data"]
        return data

    async def show(self, token_id: int) -> dict[str, Any]:
        detail: dict[str, Any] = (await self._call("GET", f"/tokens/{token_id}")).json()
        return detail

    async def rotate(self, token_id: int) -> str:
        return str((await self._call("POST", f"/tokens/{token_id}/rotate")).json()["token"])

    async def delete(self, token_id: int, purge: bool) -> None:
        params = {"purge": "true"} if purge else {}
        await self._call("DELETE", f"/tokens/{token_id}", params=params)

    async def curated_put(self, token_id: int, kind: str, user: str, text: str) -> None:
        await self._call(
            "PUT",
            f"/tokens/{token_id}/curated/{kind}",
            params={"user": user} if user else {},
            content=text.encode(),
            headers={"Content-Type": "text/markdown; charset=utf-8"},
        )

    async def curated_get(self, token_id: int, kind: str, user: str) -> str:
        params = {"user": user} if user else {}
        return (await self._call("GET", f"/tokens/{token_id}/curated/{kind}", params=params)).text

    async def curated_delete(self, token_id: int, kind: str, user: str) -> None:
        params = {"user": user} if user else {}
        await self._call("DELETE", f"/tokens/{token_id}/curated/{kind}", params=params)
