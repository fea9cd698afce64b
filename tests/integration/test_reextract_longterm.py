"""`rebuild?layer=longterm&reextract=true` through the real proxy (openai SDK for the turns, Mem0
with the fake memory LLM): the facts are deleted and extracted again from every stored turn,
one extraction per turn, in place; a later plain rebuild restores the new facts only."""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

from memory_bridge.cli.main import cli
from tests.fakes.upstream import FakeUpstream, Scenario, extract_user_facts
from tests.support.longterm_support import (
    Running,
    memories,
    memory_fields,
    memory_texts,
    running,
    wait_for_memory,
    wait_until,
)

__all__ = ["running"]

TURNS = (
    ("a", "My sister Ingrid lives in Trondheim"),
    ("a", "I bought a red kayak last summer"),
    ("b", "Our dentist appointment is on Thursday"),
)
PREFIX = "Again: "


def _say(run: Running, token: str, session: str, text: str) -> None:
    reply = run.proxy.client(token).chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": text}],
        user="ada",
        extra_headers={"X-Session-Id": session},
    )
    assert reply.choices[0].message.content


def _reworded(user_texts: list[str]) -> Scenario:
    return extract_user_facts([PREFIX + text for text in user_texts])


def _longterm_jobs(run: Running, token_id: int) -> dict[str, int]:
    reply = run.proxy.admin("GET", f"/tokens/{token_id}/jobs")
    assert reply.status_code == 200, reply.text
    counts: dict[str, int] = reply.json()["consumers"].get("longterm", {})
    return counts


def _facts(run: Running, token_id: int) -> list[tuple[str, str]]:
    return sorted((m["memory"], m["id"]) for m in memories(run.proxy, token_id))


def _rebuild(run: Running, token_id: int, **params: Any) -> Any:
    return run.proxy.admin("POST", f"/tokens/{token_id}/rebuild", params=params)


def test_reextract_runs_the_memory_llm_over_every_stored_turn(
    running: Running, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy = running.proxy
    token_id, token = proxy.create_token(**memory_fields(proxy.upstream_url))
    for session, text in TURNS:
        _say(running, token, session, text)
        wait_for_memory(proxy, token_id, text, "ada")
    old = _facts(running, token_id)
    assert [text for text, _ in old] == sorted(text for _, text in TURNS)
    wait_until(lambda: _longterm_jobs(running, token_id) == {"done": 3}, what="the turns' jobs")

    # Not for the episodic layer: refused, nothing changes.
    refused = _rebuild(running, token_id, layer="episodic", reextract="true")
    assert refused.status_code == 422, refused.text
    assert _facts(running, token_id) == old

    extractions = len(upstream.memory_requests)
    upstream.memory_responder = _reworded  # the re-extraction's facts read differently
    # Through the CLI, which starts it with the admin API and follows the jobs until drained.
    monkeypatch.setenv("MEMORY_BRIDGE_ADMIN_TOKEN", proxy.admin_token)
    command = ["rebuild", "--token", str(token_id), "--layer", "longterm", "--reextract"]
    result = CliRunner().invoke(cli, [*command, "--url", proxy.url])
    assert result.exit_code == 0, result.output
    assert f"Token {token_id}: longterm: 3 turn(s) re-extracted." in result.output
    assert "reextract idle 3/3" in result.output
    assert _longterm_jobs(running, token_id) == {"done": 3}
    new_texts = sorted(PREFIX + text for _, text in TURNS)
    assert [text for text, _ in _facts(running, token_id)] == new_texts
    assert len(upstream.memory_requests) == extractions + 3  # one extraction per stored turn
    new = _facts(running, token_id)
    assert not {i for _, i in new} & {i for _, i in old}  # none of the old facts is left

    # A plain rebuild replays retained(old) -> deleted(reextract) -> retained(new): the new set
    # exactly, no duplicate, no old fact back, and no LLM call.
    calls = len(upstream.chat_requests)
    reply = _rebuild(running, token_id, layer="longterm")
    assert reply.status_code == 202, reply.text

    def switched() -> bool:
        state = proxy.admin("GET", f"/tokens/{token_id}/rebuild").json()["layers"]["longterm"]
        return bool(state["state"] == "idle" and state["active"]["model"].endswith("@g1"))

    wait_until(switched, what="the rebuild's switch")
    assert _facts(running, token_id) == new
    assert memory_texts(proxy, token_id, "ada") == set(new_texts)
    assert len(upstream.chat_requests) == calls
