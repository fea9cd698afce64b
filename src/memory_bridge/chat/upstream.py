"""The upstream LLM: one shared aiohttp connection pool, requests built from the token's config.

aiohttp rather than httpx on this path because it is the proxy's hottest code: against the
same upstream aiohttp spends several times less CPU per request and per stream
(docs/performance.md#figures-behind-code-choices). The Gateway and Mem0 clients, off the hot
path, stay on httpx.
"""

from __future__ import annotations

import asyncio
import logging
import urllib.request
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import urlsplit

import aiohttp
from starlette.responses import Response

from memory_bridge.core import metrics
from memory_bridge.core.errors import ProxyError
from memory_bridge.tenancy.config import TokenConfig

log = logging.getLogger(__name__)

# What a broken upstream exchange raises: connection, protocol and payload errors, and the
# socket timeouts (asyncio.TimeoutError) aiohttp raises for a silent peer.
UPSTREAM_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError)

# Hop-by-hop headers (RFC 9110 §7.6.1) and framing headers that no longer describe the body
# once it has been decoded and our server re-frames it.
_DROP_RESPONSE_HEADERS = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"te",
        b"trailer",
        b"trailers",
        b"transfer-encoding",
        b"upgrade",
        b"content-length",
        b"content-encoding",
    }
)

# Never forwarded, even when an operator names them in the allowlist: the client's credentials
# (its Authorization is its MemoryBridge token), hop-by-hop headers, and framing the client
# library sets itself.
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


def response_headers(raw: Sequence[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The upstream's response headers as our client should see them.

    Every response carries our own `X-Request-Id` (added at the edge); the upstream's request
    id is kept, renamed to `X-Upstream-Request-Id`, so neither is lost nor made ambiguous.
    """
    out: list[tuple[bytes, bytes]] = []
    for key, value in raw:
        name = key.lower()
        if name in _DROP_RESPONSE_HEADERS:
            continue
        out.append((b"x-upstream-request-id", value) if name == b"x-request-id" else (key, value))
    return out


@dataclass(frozen=True, slots=True)
class Fetched:
    """A whole upstream response: status, headers fit for our client, decoded body."""

    status: int
    headers: list[tuple[bytes, bytes]]
    content: bytes

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


class Opened:
    """An upstream response whose head has arrived and whose body is still to be read.

    Whoever opens one must `close()` it: released to the pool when the body was read to the
    end, the connection dropped otherwise (an abandoned upstream stops generating).
    """

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self.status = response.status
        self.headers = response_headers(response.raw_headers)
        self.content_type = response.headers.get("content-type", "")

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def content_length(self) -> int | None:
        """The length of the body as it will be read, when the upstream announced it.

        None for an encoded body: aiohttp decodes it, and a few compressed bytes can stand for
        any number of decoded ones.
        """
        if "content-encoding" in self._response.headers:
            return None
        return self._response.content_length

    def unavailable(self, exc: BaseException) -> ProxyError:
        """Our 502 for a body that broke off before it was whole."""
        return _unavailable(self._response.method, str(self._response.url), exc)

    async def read(self) -> bytes:
        """The whole body; a failure while reading it is a 502 of ours."""
        try:
            return await self._response.read()
        except UPSTREAM_ERRORS as exc:
            raise self.unavailable(exc) from None

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body as it arrives, in whatever pieces are buffered (never empty ones)."""
        async for chunk in self._response.content.iter_any():
            yield chunk

    def close(self) -> None:
        if self._response.content.at_eof():
            self._response.release()
        else:
            self._response.close()


def passthrough(reply: Fetched, extra: Sequence[tuple[bytes, bytes]] = ()) -> Response:
    """The upstream's status, headers and (decoded) body, re-framed for our client."""
    response = Response(content=reply.content, status_code=reply.status)
    response.raw_headers = [*reply.headers, *response.raw_headers, *extra]
    return response


def create_session(
    *,
    timeout: float,
    connect_timeout: float,
    max_connections: int,
    keepalive_timeout: float = 4.0,
) -> aiohttp.ClientSession:
    """The process's one connection pool to upstream LLMs (made inside the running loop).

    Idle connections are dropped after `keepalive_timeout`, before the upstream drops them:
    servers commonly close idle keep-alive connections after 5 s (uvicorn, Node), and a request
    sent on a connection the server is closing fails (seen once in a 2,000-request burst).
    """
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(
            limit=max_connections, limit_per_host=0, keepalive_timeout=keepalive_timeout
        ),
        # No total limit: a long generation is fine as long as bytes keep coming.
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout, sock_read=timeout),
        # Off: aiohttp would then read the environment and ~/.netrc on every request, on a
        # thread (a large share of the proxy's CPU). `EnvProxies` reads them once instead.
        trust_env=False,
        # Redirects are not followed: an LLM API that redirects a POST is misconfigured.
        cookie_jar=aiohttp.DummyCookieJar(),
    )


class EnvProxies:
    """HTTP(S)_PROXY / NO_PROXY as read from the environment at start-up, as the other HTTP
    clients of the process (httpx) honour them; the answer is cached per scheme and host."""

    def __init__(self, proxies: Mapping[str, str] | None = None) -> None:
        self._proxies = dict(urllib.request.getproxies() if proxies is None else proxies)
        self.for_url = lru_cache(maxsize=256)(self._lookup)

    def _lookup(self, url: str) -> str | None:
        parts = urlsplit(url)
        proxy = self._proxies.get(parts.scheme)
        if not proxy or _bypassed(parts.hostname or "", self._proxies.get("no", "")):
            return None
        return proxy


def _bypassed(host: str, no_proxy: str) -> bool:
    """NO_PROXY as curl reads it: `*`, or host names matched with their subdomains."""
    for entry in (e.strip().lower() for e in no_proxy.split(",")):
        if entry == "*":
            return True
        entry = entry.lstrip(".")
        if entry.count(":") == 1:  # host:port (an IPv6 address has more colons)
            entry = entry.partition(":")[0]
        if entry and (host == entry or host.endswith("." + entry)):
            return True
    return False


class Upstream:
    def __init__(
        self,
        session: aiohttp.ClientSession,
        forwarded: frozenset[str],
        proxies: EnvProxies | None = None,
    ) -> None:
        self._session = session
        self._forwarded = forwarded - _NEVER_FORWARDED
        self._proxies = proxies or EnvProxies()

    def request_headers(
        self, config: TokenConfig, incoming: Mapping[str, str], *, json_body: bool
    ) -> dict[str, str]:
        # Names arrive lower-cased (ASGI), as the allowlist holds them.
        headers = {k: v for k, v in incoming.items() if k in self._forwarded}
        if json_body:
            headers["content-type"] = "application/json"
        if config.llm_api_key:
            headers["authorization"] = f"Bearer {config.llm_api_key}"
        return headers

    async def fetch(
        self, method: str, url: str, headers: dict[str, str], content: bytes | None = None
    ) -> Fetched:
        """Send a request and read the whole response; failures before it completes are 502."""
        try:
            async with await self._send(method, url, headers, content) as response:
                body = await response.read()
                return Fetched(response.status, response_headers(response.raw_headers), body)
        except UPSTREAM_ERRORS as exc:
            raise _unavailable(method, url, exc) from None

    async def open(
        self, method: str, url: str, headers: dict[str, str], content: bytes | None = None
    ) -> Opened:
        """Send a request and return once the response head has arrived; body not yet read.

        A failure before the head arrives is a 502 of ours; any HTTP status is the caller's
        to pass through.
        """
        try:
            opened = Opened(await self._send(method, url, headers, content))
        except UPSTREAM_ERRORS as exc:
            metrics.upstream_error(failure_category(exc))
            raise _unavailable(method, url, exc) from None
        if opened.status >= 400:
            metrics.upstream_error("http_5xx" if opened.status >= 500 else "http_4xx")
        return opened

    async def _send(
        self, method: str, url: str, headers: dict[str, str], content: bytes | None
    ) -> aiohttp.ClientResponse:
        # Awaited here, so only the public response type leaves this method; a response is an
        # async context manager of its own (released on exit) for `fetch`.
        return await self._session.request(
            method,
            url,
            headers=headers,
            data=content,
            allow_redirects=False,
            proxy=self._proxies.for_url(url),
        )


def _unavailable(method: str, url: str, exc: BaseException) -> ProxyError:
    # The path only: a query string or userinfo could carry credentials. The category tells
    # a wrong host from a refused port, a TLS problem or a silent upstream; the request id is
    # on every log line (logs.py).
    path = url.split("://", 1)[-1].partition("/")[2].partition("?")[0]
    category = failure_category(exc)
    log.warning("upstream %s /%s failed (%s): %s", method, path, category, type(exc).__name__)
    return ProxyError(
        502,
        "upstream_unavailable",
        f"The upstream LLM could not be reached ({category}: {type(exc).__name__}).",
    )


# Most specific first: aiohttp's connector errors subclass one another.
_CATEGORIES: tuple[tuple[type[BaseException] | tuple[type[BaseException], ...], str], ...] = (
    (aiohttp.ClientConnectorDNSError, "dns_error"),
    ((aiohttp.ClientConnectorCertificateError, aiohttp.ClientSSLError), "tls_error"),
    (aiohttp.ClientProxyConnectionError, "proxy_error"),
    ((aiohttp.ServerTimeoutError, asyncio.TimeoutError), "timeout"),
    (aiohttp.ClientConnectorError, "connect_failed"),
    (aiohttp.ServerDisconnectedError, "disconnected"),
    (aiohttp.ClientPayloadError, "broken_body"),
)


def failure_category(exc: BaseException) -> str:
    """Why an upstream exchange broke: `dns_error`, `connect_failed` (refused, unreachable),
    `tls_error`, `timeout`, `disconnected`, `broken_body`, ... or `connection_error`."""
    for kinds, category in _CATEGORIES:
        if isinstance(exc, kinds):
            return category
    return "connection_error"
