"""The upstream LLM: one shared connection pool, requests built from the token's config."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import httpx
from starlette.responses import Response

from memory_bridge.errors import ProxyError
from memory_bridge.tenancy.config import TokenConfig

log = logging.getLogger(__name__)

# Hop-by-hop headers (RFC 9110 §7.6.1) and framing headers that no longer describe the body
# once httpx has decoded it and the server re-frames it.
_DROP_RESPONSE_HEADERS = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
        "content-length",
        "content-encoding",
    }
)


def response_headers(headers: httpx.Headers) -> list[tuple[bytes, bytes]]:
    """The upstream's response headers as our client should see them.

    Every response carries our own `X-Request-Id` (added at the edge); the upstream's request
    id is kept, renamed to `X-Upstream-Request-Id`, so neither is lost nor made ambiguous.
    """
    out: list[tuple[bytes, bytes]] = []
    for key, value in headers.raw:
        name = key.decode("latin-1").lower()
        if name in _DROP_RESPONSE_HEADERS:
            continue
        out.append((b"x-upstream-request-id", value) if name == "x-request-id" else (key, value))
    return out


def passthrough(
    upstream: httpx.Response, content: bytes, extra: Sequence[tuple[bytes, bytes]] = ()
) -> Response:
    """The upstream's status, headers and (decoded) body, re-framed for our client."""
    response = Response(content=content, status_code=upstream.status_code)
    response.raw_headers = [*response_headers(upstream.headers), *response.raw_headers, *extra]
    return response


# Never forwarded, even when an operator names them in the allowlist: the client's credentials
# (its Authorization is its MemoryBridge token), hop-by-hop headers, and framing httpx sets.
_NEVER_FORWARDED = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "cookie",
        "host",
        "content-length",
        "content-encoding",
        "connection",
        "keep-alive",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)


class Upstream:
    def __init__(self, client: httpx.AsyncClient, forwarded: frozenset[str]) -> None:
        self._client = client
        self._forwarded = forwarded - _NEVER_FORWARDED

    def request_headers(
        self, config: TokenConfig, incoming: Mapping[str, str], *, json_body: bool
    ) -> dict[str, str]:
        headers = {k: v for k, v in incoming.items() if k.lower() in self._forwarded}
        if json_body:
            headers["content-type"] = "application/json"
        if config.llm_api_key:
            headers["authorization"] = f"Bearer {config.llm_api_key}"
        return headers

    async def fetch(
        self, method: str, url: str, headers: dict[str, str], content: bytes | None = None
    ) -> httpx.Response:
        """Send a request and read the whole response; failures before it completes are 502."""
        request = self._client.build_request(method, url, headers=headers, content=content)
        try:
            return await self._client.send(request)
        except httpx.HTTPError as exc:
            raise _unavailable(method, request, exc) from None

    async def open(
        self, method: str, url: str, headers: dict[str, str], content: bytes | None = None
    ) -> httpx.Response:
        """Send a request and return once the response head has arrived; body not yet read.

        A failure before the head arrives is a 502 of ours; any HTTP status is the caller's
        to pass through.
        """
        request = self._client.build_request(method, url, headers=headers, content=content)
        try:
            return await self._client.send(request, stream=True)
        except httpx.HTTPError as exc:
            raise _unavailable(method, request, exc) from None


def _unavailable(method: str, request: httpx.Request, exc: Exception) -> ProxyError:
    log.warning("upstream %s %s failed: %s", method, request.url.path, type(exc).__name__)
    return ProxyError(
        502,
        "upstream_unavailable",
        f"The upstream LLM could not be reached ({type(exc).__name__}).",
    )
