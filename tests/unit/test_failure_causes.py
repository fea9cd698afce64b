"""The category a long-term memory failure gets (what a client's 502 names), and whether
asking again can help (Retry-After) or not (x-should-retry: false)."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from memory_bridge.context.recall import recall_all
from memory_bridge.core.errors import ProxyError
from memory_bridge.core.turn import Scope, Turn
from memory_bridge.sources.base import OnRecallFailure, Recall
from memory_bridge.sources.failures import RecallFailed, classify
from memory_bridge.sources.longterm.config import Mem0ConfigError
from memory_bridge.tenancy.config import TokenConfig
from memory_bridge.vectors.index import DimensionMismatch, VectorIndexError

REQUEST = httpx.Request("POST", "http://embedder.test/v1/embeddings")


def _status_error(status: int, headers: dict[str, str] | None = None) -> openai.APIStatusError:
    response = httpx.Response(status, request=REQUEST, headers=headers)
    return openai.APIStatusError("failed", response=response, body=None)


def _raised_from(module: str, exc: Exception) -> Exception:
    """`exc` raised by code whose module is `module` (as a library's frame would be)."""
    scope: dict[str, Any] = {"__name__": module, "exc": exc}
    try:
        exec("def fail():\n    raise exc\nfail()", scope)
    except Exception as raised:
        return raised
    raise AssertionError("not raised")


def _chained(outer: Exception, inner: BaseException) -> Exception:
    try:
        try:
            raise inner
        except BaseException as exc:
            raise outer from exc
    except Exception as raised:
        return raised
    raise AssertionError("not raised")


@pytest.mark.parametrize(
    ("exc", "category", "retryable"),
    [
        (TimeoutError(), "timeout", True),
        (Mem0ConfigError("groq takes no base URL"), "config_error", False),
        (openai.APIConnectionError(request=REQUEST), "embedder_unreachable", False),
        (openai.APITimeoutError(request=REQUEST), "embedder_timeout", True),
        (httpx.ConnectError("refused"), "embedder_unreachable", False),
        (httpx.ReadTimeout("slow"), "embedder_timeout", True),
        (_status_error(401), "embedder_error_401", False),
        (_status_error(404), "embedder_error_404", False),
        (_status_error(429), "embedder_error_429", True),
        (_status_error(503), "embedder_error_503", True),
        (
            UnexpectedResponse(500, "Internal", b"boom", httpx.Headers()),
            "vector_store_error",
            False,
        ),
        (ResponseHandlingException(OSError("refused")), "vector_store_error", False),
        (
            _raised_from("qdrant_client.local.qdrant_local", ValueError("dims")),
            "vector_store_error",
            False,
        ),
        (VectorIndexError("shard refused"), "vector_store_error", False),
        (_raised_from("memory_bridge.vectors.edge", OSError("disk")), "vector_store_error", False),
        (DimensionMismatch("8 is not 16"), "embedder_dimension_mismatch", False),
        (
            _chained(RuntimeError("needs the local extra"), ModuleNotFoundError(name="torch")),
            "local_embedder_unavailable",
            False,
        ),
        (
            _chained(RuntimeError("x"), ModuleNotFoundError(name="sentence_transformers.models")),
            "local_embedder_unavailable",
            False,
        ),
        (
            _chained(RuntimeError("x"), ModuleNotFoundError(name="ollama")),
            "dependency_missing",
            False,
        ),
        (
            _raised_from("memory_bridge.embedding.local", ValueError("embed_dims")),
            "local_embedder_error",
            False,
        ),
        (ValueError("something else"), "longterm_error", False),
    ],
)
def test_categories(exc: Exception, category: str, retryable: bool) -> None:
    cause = classify(exc)
    assert cause.category == category
    assert cause.retryable is retryable
    headers = dict(cause.headers())
    if retryable:
        assert headers == {"retry-after": "5"}
    else:
        assert headers == {"x-should-retry": "false"}


def test_an_embedders_own_retry_after_is_passed_on() -> None:
    assert dict(classify(_status_error(429, {"retry-after": "30"})).headers()) == {
        "retry-after": "30"
    }
    # Not a number of seconds (an HTTP date), or absurd: our default.
    for value in ("Wed, 21 Oct 2015 07:28:00 GMT", "0", "99999"):
        cause = classify(_status_error(503, {"retry-after": value}))
        assert dict(cause.headers()) == {"retry-after": "5"}


def test_the_category_never_carries_the_exceptions_text() -> None:
    secret = "sk-embed-secret-0123456789"
    for exc in (
        openai.APIConnectionError(message=f"bad {secret}", request=REQUEST),
        ValueError(secret),
        _status_error(401),
    ):
        cause = classify(exc)
        assert secret not in cause.category + cause.hint
        assert secret not in str(RecallFailed("longterm", cause))


class _Failing:
    name = "longterm"
    on_recall_failure = OnRecallFailure.MEMORY_UNAVAILABLE

    def __init__(self, exc: Exception) -> None:
        self._exc = exc

    async def recall(self, turn: Turn) -> Recall:
        raise self._exc


class _BestEffort(_Failing):
    name = "gateway"
    on_recall_failure = OnRecallFailure.BEST_EFFORT


TURN = Turn(
    request_id="r",
    scope=Scope(token_id=1),
    config=TokenConfig(name="t", llm_base_url="http://llm.test"),
    messages=(),
    query="q",
)


async def test_the_failure_policy_names_the_cause_and_sets_the_retry_headers() -> None:
    failed = RecallFailed("longterm", classify(_status_error(503)))
    with pytest.raises(ProxyError) as caught:
        await recall_all((_Failing(failed),), TURN)  # type: ignore[arg-type]
    error = caught.value
    assert (error.status, error.type) == (502, "memory_retrieval_failed")
    assert error.message == (
        "Memory retrieval failed (longterm: embedder_error_503): the embedder answered HTTP 503."
    )
    assert error.headers == (("retry-after", "5"),)
    # An exception without a known cause keeps the plain message and sends no header.
    with pytest.raises(ProxyError) as plain:
        await recall_all((_Failing(ValueError("x")),), TURN)  # type: ignore[arg-type]
    assert plain.value.message == "Memory retrieval failed (longterm)."
    assert plain.value.headers == ()


async def test_a_best_effort_failure_is_reported_as_error_in_the_diagnostics() -> None:
    [recall] = await recall_all((_BestEffort(ValueError("down")),), TURN)  # type: ignore[arg-type]
    assert recall.injected == "error"
