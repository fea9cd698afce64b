"""Driving one conversation through MemoryBridge, turn by turn, and reading back what the
recording fake upstream received each turn."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from bench.memorybridge import CURATED_MEMORY, CURATED_USER, UPSTREAM_KEY, MemoryBridge
from bench.placement.prefix import measure
from bench.placement.prompts import CLIENT_SYSTEM, END_USER, SESSION, user_text
from bench.processes import log


@dataclass
class Conversation:
    name: str
    build: str  # which MemoryBridge serves it: "current" or "old"
    window: int  # the token's session_window_size
    placement: str = "stable"  # the token's memory.placement
    turns: list[dict[str, Any]] = field(default_factory=list)
    token_id: int = 0
    layers: dict[str, Any] = field(default_factory=dict)


def token_config(
    name: str, upstream: str, gateway: str, window: int, placement: str = "stable"
) -> dict[str, Any]:
    """Every layer on: curated (documents put after), history, Gateway, long-term (Mem0)."""
    memory: dict[str, Any] = {
        "mode": "hybrid",
        "gateway": {"baseUrl": gateway, "userId": "bench-user", "userKey": "uk-bench-key"},
    }
    if placement != "stable":  # an older build knows no placement option
        memory["placement"] = placement
    return {
        "name": name,
        "llm_base_url": upstream,
        "llm_api_key": UPSTREAM_KEY,
        "session_window_size": window,
        "memory": memory,
        "memory_llm_provider": "openai",
        "memory_llm_base_url": f"{upstream}/v1",
        "memory_llm_api_key": UPSTREAM_KEY,
        "memory_llm_body": {"model": "bench-mem0"},
        "embed_provider": "openai",
        "embed_base_url": f"{upstream}/v1",
        "embed_api_key": UPSTREAM_KEY,
        "embed_dims": 64,
        "embed_body": {"model": "bench-embed-bow"},  # related texts rank first
    }


def injected(header: str | None) -> dict[str, str]:
    """`curated=1, history=6, gateway=2, longterm=3` as a dict."""
    parts = (p.strip().split("=", 1) for p in (header or "").split(",") if "=" in p)
    return {k: v for k, v in parts}


@dataclass
class Settler:
    """Waits, after a turn, until its after-turn work (Mem0's extraction and writes, queued
    jobs) is done, so the next turn recalls what this one stored, in every build alike."""

    mb: MemoryBridge
    stats_url: str
    jobs_api: bool = False

    def stats(self) -> dict[str, int]:
        data: dict[str, int] = httpx.get(self.stats_url, timeout=10, trust_env=False).json()
        return data

    def open_jobs(self, token_id: int) -> bool:
        if not self.jobs_api:
            return False
        reply = self.mb.admin_call("GET", f"/tokens/{token_id}/jobs")
        return reply.status_code == 200 and reply.json()["oldest_pending_age_seconds"] is not None

    def wait(self, token_id: int, mem0_before: int, limit: float = 120.0) -> float:
        started = time.monotonic()
        deadline = started + limit
        # The turn's extraction call (within 5 s: a turn may give Mem0 nothing to extract).
        while time.monotonic() < min(deadline, started + 5) and self.stats()["mem0"] <= mem0_before:
            time.sleep(0.05)
        while time.monotonic() < deadline and self.open_jobs(token_id):
            time.sleep(0.05)
        # Then 0.3 s without a call to the embedder or the extraction LLM.
        last, since = self.stats(), time.monotonic()
        while time.monotonic() < deadline and time.monotonic() - since < 0.3:
            time.sleep(0.05)
            now = self.stats()
            if (now["embeddings"], now["mem0"]) != (last["embeddings"], last["mem0"]):
                last, since = now, time.monotonic()
        return time.monotonic() - started


def run_conversation(
    conv: Conversation,
    mb: MemoryBridge,
    token: str,
    upstream: str,
    settler: Settler,
    turns: int,
    reply_bytes: int,
) -> None:
    model = f"bench-placement-{conv.name}-reply-{reply_bytes}"
    headers = {"Authorization": f"Bearer {token}", "X-Session-Id": SESSION}
    previous: tuple[list[dict[str, Any]], bytes] | None = None
    with httpx.Client(base_url=mb.url, headers=headers, timeout=120, trust_env=False) as client:
        for turn in range(1, turns + 1):
            mem0_before = settler.stats()["mem0"]
            reply = client.post(
                "/v1/chat/completions",
                json={
                    "model": model,
                    "user": END_USER,
                    "messages": [
                        {"role": "system", "content": CLIENT_SYSTEM},
                        {"role": "user", "content": user_text(turn)},
                    ],
                },
            )
            if reply.status_code != 200:
                raise RuntimeError(f"{conv.name} turn {turn}: {reply.status_code} {reply.text}")
            layers = injected(reply.headers.get("x-memorybridge-injected"))
            forwarded = httpx.get(
                f"{upstream}/_last", params={"model": model}, timeout=10, trust_env=False
            )
            forwarded.raise_for_status()
            body = forwarded.content
            messages: list[dict[str, Any]] = json.loads(body)["messages"]
            record: dict[str, Any] = {"turn": turn, "injected": layers}
            record |= measure(messages, body, previous)
            record["settle_s"] = round(settler.wait(conv.token_id, mem0_before), 2)
            conv.turns.append(record)
            previous = (messages, body)
            share = "—" if record["share"] is None else f"{100 * record['share']:.1f}%"
            log(
                f"{conv.name} turn {turn}: {record['bytes']} bytes, share {share}, "
                f"breaks in {record['breaks_in']}, injected {layers}"
            )


def prepare(conv: Conversation, mb: MemoryBridge, upstream: str, gateway: str) -> str:
    """The conversation's token (every layer on, curated documents put); its token secret."""
    created = mb.create_token(
        token_config(f"bench-placement-{conv.name}", upstream, gateway, conv.window, conv.placement)
    )
    conv.token_id = created["id"]
    conv.layers = created.get("memory_layers") or {}
    mb.put_curated(conv.token_id, "memory", CURATED_MEMORY)
    mb.put_curated(conv.token_id, "user", CURATED_USER)
    token: str = created["token"]
    return token


def check_layers(conv: Conversation) -> list[str]:
    """Problems that would make a conversation's figures not 'every layer on'."""
    problems = []
    for name in ("curated", "gateway"):
        missing = [t["turn"] for t in conv.turns if t["injected"].get(name, "0") in ("0", "error")]
        if missing:
            problems.append(f"{conv.name}: no {name} injected on turns {missing}")
    if conv.turns and not any(t["injected"].get("longterm", "0") != "0" for t in conv.turns[1:]):
        problems.append(f"{conv.name}: no long-term memory injected on any turn")
    for t in conv.turns:
        # The whole window, or (a window that slides in steps) at least its newer half.
        most = min(2 * (t["turn"] - 1), conv.window)
        least = min(most, conv.window // 2)
        if not least <= int(t["injected"].get("history", "0")) <= most:
            problems.append(
                f"{conv.name} turn {t['turn']}: history {t['injected'].get('history')}, "
                f"expected {least}..{most}"
            )
    return problems
