"""Giving the client's own fields back in streamed response objects, whatever the framing."""

from __future__ import annotations

import json

import pytest

from memory_bridge.chat.response_claims import Echo, _fix_events, echo_of
from memory_bridge.storage.response_owners import NO_INSTRUCTIONS

INJECTED = "Mine.\n\n## Curated memory"


def _created(instructions: str | None) -> dict[str, object]:
    response = {"id": "resp_1", "object": "response", "instructions": instructions}
    return {"type": "response.created", "response": response, "sequence_number": 0}


@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"])
def test_each_event_with_a_response_object_is_fixed_and_the_rest_kept(eol: bytes) -> None:
    created = json.dumps(_created(INJECTED)).encode()
    half = created.index(b', "sequence_number"') + 1  # between two JSON tokens
    delta = b'{"type":"response.output_text.delta","delta":"\\"response\\": x"}'
    piece = (
        b"event: response.created" + eol + b"data: " + created[:half] + eol
        + b"data:" + created[half:] + eol + eol
        + b"event: response.output_text.delta" + eol + b"data: " + delta + eol + eol
    )  # fmt: skip
    fixed, seen = _fix_events(piece, Echo((("instructions", "Mine."),)))
    assert seen == "resp_1"
    first, second = fixed.split(eol + eol, 1)
    assert first.split(eol)[0] == b"event: response.created"
    [data] = [line for line in first.split(eol) if line.startswith(b"data:")]
    assert json.loads(data[5:]) == _created("Mine.")
    assert second == b"event: response.output_text.delta" + eol + b"data: " + delta + eol + eol


def test_nothing_to_fix_keeps_the_bytes_and_still_finds_the_id() -> None:
    piece = b"event: response.created\ndata: " + json.dumps(_created("Mine.")).encode() + b"\n\n"
    assert _fix_events(piece, Echo((("instructions", "Mine."),))) == (piece, "resp_1")


@pytest.mark.parametrize(
    ("kept", "echoed", "given"),
    [(5, INJECTED, "Mine."), (0, "## Curated memory", ""), (NO_INSTRUCTIONS, INJECTED, None)],
)
def test_a_retrieved_response_keeps_the_clients_part(
    kept: int, echoed: str, given: str | None
) -> None:
    response: dict[str, object] = {"id": "resp_1", "instructions": echoed}
    assert Echo(kept=kept).fix(response) and response["instructions"] == given


def test_the_mark_says_what_the_client_sent() -> None:
    forwarded = {"instructions": INJECTED, "input": "x"}
    for client, mark in (({"input": "x"}, NO_INSTRUCTIONS), ({"instructions": ""}, 0)):
        assert echo_of(client, {**client, **forwarded}).mark == mark
    client = {"instructions": "Mine.", "input": "x"}
    echo = echo_of(client, {**client, "instructions": INJECTED})
    assert echo.fields == (("instructions", "Mine."),) and echo.mark == 5
    assert echo_of(client, None) == Echo()
