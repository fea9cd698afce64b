"""Reading an import: every line checked before anything is applied; a bad one named by its
number, with nothing staged left behind."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from memory_bridge.lifecycle import import_lines
from memory_bridge.lifecycle.import_lines import ImportBounds, ImportRefused, stage
from memory_bridge.lifecycle.import_payloads import payload_of
from memory_bridge.lifecycle.transfer import UnknownClass, parse_classes

BOUNDS = ImportBounds(curated_max_bytes=65536, max_stored_message_bytes=65536)
HEADER = {"format": "memory-bridge.export", "version": 1, "install": "x", "events": 2}
TURN = {
    "event_id": "e1",
    "type": "session.appended",
    "payload": {
        "user": "ada",
        "session": "s",
        "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
        "query": "hi",
        "finish_reason": "stop",
    },
    "meta": {"request_id": "r1", "source": "chat", "extra": "dropped"},
    "embed_model": None,
    "created_at": "2026-01-02T03:04:05+01:00",
}
DOC = {
    "event_id": "e2",
    "type": "curated.replaced",
    "payload": {"kind": "memory", "user": "", "body": "# Facts"},
    "created_at": "2026-01-02T03:04:05",
}


async def _chunks(text: str, size: int = 7) -> AsyncIterator[bytes]:
    raw = text.encode()
    for i in range(0, len(raw), size):  # lines split across chunks, as a network delivers them
        yield raw[i : i + size]


def _body(*lines: Any) -> str:
    return "".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines)


async def test_a_valid_import_is_staged_normalised(tmp_path: Path) -> None:
    staged = await stage(_chunks(_body(HEADER, TURN, "", DOC)), tmp_path, BOUNDS)
    events = list(staged.read())
    assert (staged.events, staged.counts) == (2, {"sessions": 1, "curated": 1})
    assert [e.origin for e in events] == ["e1", "e2"]
    assert events[0].meta == {"request_id": "r1"}  # only what the log's meta holds
    assert events[0].created_at.isoformat() == "2026-01-02T02:04:05+00:00"
    assert events[1].created_at.tzinfo is not None
    assert stat_mode(staged.path) == 0o600
    staged.discard()
    assert not list(tmp_path.iterdir())


def stat_mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def _with(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {**base, **changes}


BAD = [
    (_body(TURN), 1, "header"),
    (_body(_with(HEADER, version=2)), 1, "version 2"),
    (_body(HEADER, "{not json"), 2, "not valid JSON"),
    (_body(HEADER, "[1, 2]"), 2, "not a JSON object"),
    (_body(HEADER, TURN, _with(TURN, type="user.erased")), 3, "not importable"),
    (_body(HEADER, _with(TURN, payload={"user": "a"})), 2, "missing field 'session'"),
    (_body(HEADER, _with(TURN, event_id="")), 2, "'event_id'"),
    (_body(HEADER, _with(TURN, created_at="yesterday")), 2, "ISO 8601"),
    (_body(HEADER, _with(DOC, payload={"kind": "memory", "user": "ada", "body": ""})), 2, "MEMORY"),
    (_body(HEADER, _with(DOC, payload={"kind": "x", "user": "", "body": ""})), 2, "'kind'"),
    (
        _body(HEADER, _with(TURN, payload={**TURN["payload"], "messages": [{"role": "x"}]})),
        2,
        "chat message",
    ),
    (_body(HEADER, _with(TURN, payload={**TURN["payload"], "user": "a\nb"})), 2, "control"),
    (_body(HEADER, _with(DOC, payload={"kind": "memory", "user": "", "body": "a\x00"})), 2, "NUL"),
    (_body(HEADER, '{"event_id": "\\ud800"}'), 2, "not valid Unicode"),
    (_body(HEADER, "[" * 100_000 + "]" * 100_000), 2, "nested too deeply"),
    ("", 1, "empty"),
]


@pytest.mark.parametrize(("body", "line", "reason"), BAD)
async def test_a_bad_line_refuses_the_import(
    tmp_path: Path, body: str, line: int, reason: str
) -> None:
    with pytest.raises(ImportRefused) as refused:
        await stage(_chunks(body, 4096), tmp_path, BOUNDS)
    assert refused.value.status == 422 and refused.value.line == line
    assert refused.value.message.startswith(f"Line {line}: ") and reason in refused.value.message
    assert not list(tmp_path.iterdir())  # nothing staged is left


async def test_a_line_over_the_bound_is_refused_before_it_is_held(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(import_lines, "MAX_LINE_BYTES", 1000)
    endless = _body(HEADER) + "x" * 5000  # no newline in sight

    async def chunks() -> AsyncIterator[bytes]:
        for i in range(0, len(endless), 100):
            yield endless[i : i + 100].encode()

    with pytest.raises(ImportRefused) as refused:
        await stage(chunks(), tmp_path, BOUNDS)
    assert refused.value.line == 2 and "longer than 1000 bytes" in refused.value.message


def test_content_classes_are_named_exactly() -> None:
    assert parse_classes("sessions, curated,,") == ("curated", "sessions")
    assert parse_classes("") == () and parse_classes(None) == ()
    with pytest.raises(UnknownClass, match="'secrets'"):
        parse_classes("curated,secrets")


async def test_an_import_obeys_the_api_bounds(tmp_path: Path) -> None:
    """A curated document over CURATED_MAX_BYTES refuses the import (413, as the admin PUT);
    messages, the query and fact texts over MAX_STORED_MESSAGE_BYTES are cut with the chat
    path's visible marker."""
    tight = ImportBounds(curated_max_bytes=100, max_stored_message_bytes=64)
    big_doc = {**DOC, "payload": {"kind": "memory", "user": "", "body": "x" * 101}}
    with pytest.raises(ImportRefused) as refused:
        await stage(_chunks(_body(HEADER, TURN, big_doc), 4096), tmp_path, tight)
    assert refused.value.status == 413 and refused.value.line == 3
    assert "100 bytes" in refused.value.message
    assert not list(tmp_path.iterdir())
    fits = {**DOC, "payload": {"kind": "memory", "user": "", "body": "é" * 50}}  # 100 bytes
    long = "y" * 1000
    turn = {**TURN, "payload": {**TURN["payload"], "query": long}}
    turn["payload"]["messages"] = [{"role": "user", "content": long, "extra": "dropped"}]
    fact = {
        "event_id": "e3",
        "type": "longterm.retained",
        "payload": {"user": "ada", "memory_id": "m1", "text": long, "source_event_id": "e1"},
        "created_at": "2026-01-02T03:04:05",
    }
    staged = await stage(_chunks(_body(HEADER, turn, fits, fact), 4096), tmp_path, tight)
    stored_turn, doc, stored_fact = staged.read()
    (message,) = stored_turn.payload["messages"]
    for text in (message["content"], stored_turn.payload["query"], stored_fact.payload["text"]):
        assert text.startswith("y" * 64) and "[truncated by MemoryBridge" in text
        assert len(text) < 200
    assert set(message) == {"role", "content"}
    assert doc.payload["body"] == "é" * 50
    staged.discard()


def test_a_summarys_importance_is_kept_when_valid_and_refused_when_not() -> None:
    summary = {
        "user": "ada",
        "session": "s",
        "text": "T",
        "covers": ["e1"],
        "last_at": "2026-01-02",
    }
    kind = "session.summarised"
    assert "importance" not in payload_of(kind, summary, BOUNDS)  # an older export: the default
    assert payload_of(kind, {**summary, "importance": 0.9}, BOUNDS)["importance"] == 0.9
    for bad in (1.5, -1, "high", True):
        with pytest.raises(ValueError, match="importance"):
            payload_of(kind, {**summary, "importance": bad}, BOUNDS)
