"""Which upstream URLs go through HTTP(S)_PROXY, read once at start-up (NO_PROXY as curl)."""

from __future__ import annotations

import pytest

from memory_bridge.chat.upstream import EnvProxies

PROXIES = {"http": "http://proxy:3128", "https": "http://secure-proxy:3128"}


@pytest.mark.parametrize(
    ("url", "no_proxy", "expected"),
    [
        ("http://api.example.com/v1/chat/completions", "", "http://proxy:3128"),
        ("https://api.example.com/v1/chat/completions", "", "http://secure-proxy:3128"),
        ("http://localhost:8000/v1/models", "localhost,127.0.0.1", None),
        ("http://127.0.0.1:8000/v1/models", "localhost, 127.0.0.1", None),
        ("http://llm.internal.corp/v1", ".internal.corp", None),
        ("http://llm.internal.corp/v1", "internal.corp", None),
        ("http://notinternal.corp/v1", "internal.corp", "http://proxy:3128"),
        ("http://anything/v1", "*", None),
        ("http://llm.corp:8443/v1", "llm.corp:8443", None),
        ("HTTP://LLM.CORP/v1", "llm.corp", None),
    ],
)
def test_proxy_choice(url: str, no_proxy: str, expected: str | None) -> None:
    proxies = EnvProxies({**PROXIES, "no": no_proxy})
    assert proxies.for_url(url) == expected


def test_no_proxy_configured_means_direct() -> None:
    assert EnvProxies({}).for_url("https://api.openai.com/v1/chat/completions") is None


def test_the_environment_is_read_once(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "HTTP_PROXY", "no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", "http://proxy:3128")
    proxies = EnvProxies()
    monkeypatch.setenv("HTTP_PROXY", "http://other:1")
    assert proxies.for_url("http://api.example.com/v1/x") == "http://proxy:3128"
