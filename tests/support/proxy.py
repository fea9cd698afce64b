"""The real MemoryBridge app under uvicorn on loopback, with helpers to drive it as a user."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai

from memory_bridge.cli.main import initialise
from memory_bridge.server.app import create_app
from memory_bridge.settings import Settings
from tests.support.loopback import LoopbackServer

REPO = Path(__file__).resolve().parents[2]


def make_settings(data_dir: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "memory_bridge_data_dir": data_dir,
        "database_url": "",
        "memory_template_path": REPO / "templates" / "memory_template.md",
        "memory_template_zh_path": REPO / "templates" / "memory_template_zh.md",
        "log_level": "DEBUG",
        "forward_headers": "",
        # BM25-only episodic memory for tokens without an embedder: loading the local model
        # takes seconds of CPU; the tests that want it ask for "local".
        "episodic_default_embedder": "none",
    }
    values.update(overrides)
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


@dataclass
class Proxy:
    url: str
    admin_token: str
    upstream_url: str
    settings: Settings

    @property
    def admin_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.admin_token}"}

    def admin(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        return httpx.request(
            method, f"{self.url}/v1/admin{path}", headers=self.admin_headers, timeout=30, **kwargs
        )

    def create_token(self, **config: Any) -> tuple[int, str]:
        body = {"name": "test", "llm_base_url": self.upstream_url, "llm_api_key": UPSTREAM_KEY}
        body.update(config)
        reply = self.admin("POST", "/tokens", json=body)
        assert reply.status_code == 201, reply.text
        data = reply.json()
        return data["id"], data["token"]

    def client(self, token: str, **kwargs: Any) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=token, max_retries=0, **kwargs)

    def chat(
        self, token: str, headers: dict[str, str] | None = None, **body: Any
    ) -> httpx.Response:
        return httpx.post(
            f"{self.url}/v1/chat/completions",
            json=body,
            headers={"Authorization": f"Bearer {token}", **(headers or {})},
            timeout=30,
        )


UPSTREAM_KEY = "sk-upstream-secret-key-0123456789"


def start_proxy(
    data_dir: Path, upstream_url: str, **overrides: Any
) -> tuple[LoopbackServer, Proxy]:
    settings = make_settings(data_dir, **overrides)
    admin = asyncio.run(initialise(settings))
    assert admin is not None
    server = LoopbackServer(create_app(settings))
    url = server.start()
    return server, Proxy(url=url, admin_token=admin, upstream_url=upstream_url, settings=settings)
