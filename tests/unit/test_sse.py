"""SSEParser: incremental event-stream parsing that tolerates reads split at any byte."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory_bridge.chat.sse import EventBuffer, SSEEvent, SSEParser


def parse(*chunks: bytes, close: bool = True) -> list[SSEEvent]:
    parser = SSEParser()
    events: list[SSEEvent] = []
    for chunk in chunks:
        events.extend(parser.feed(chunk))
    if close:
        events.extend(parser.close())
    return events


def split_at(raw: bytes, cuts: list[int]) -> list[bytes]:
    bounds = [0, *sorted(cuts), len(raw)]
    return [raw[a:b] for a, b in itertools.pairwise(bounds)]


# --- field handling -----------------------------------------------------------------------


def test_single_event() -> None:
    assert parse(b'data: {"a": 1}\n\n', close=False) == [SSEEvent('{"a": 1}')]


def test_event_field_is_reported() -> None:
    assert parse(b"event: delta\ndata: x\n\n") == [SSEEvent("x", "delta")]


def test_event_field_does_not_leak_into_the_next_event() -> None:
    raw = b"event: delta\ndata: one\n\ndata: two\n\n"
    assert parse(raw) == [SSEEvent("one", "delta"), SSEEvent("two")]


def test_event_field_without_data_is_forgotten_at_the_blank_line() -> None:
    assert parse(b"event: ping\n\ndata: x\n\n") == [SSEEvent("x")]


def test_empty_event_field_means_no_event_name() -> None:
    assert parse(b"event:\ndata: x\n\n") == [SSEEvent("x", None)]


def test_multiple_data_lines_are_joined_with_newline() -> None:
    assert parse(b"data: one\ndata: two\ndata:three\n\n") == [SSEEvent("one\ntwo\nthree")]


@pytest.mark.parametrize(
    ("line", "data"),
    [
        (b"data:x", "x"),
        (b"data: x", "x"),
        (b"data:  x", " x"),
        (b"data: x ", "x "),
        (b"data:", ""),
        (b"data", ""),
        (b"data: a:b: c", "a:b: c"),
    ],
)
def test_exactly_one_leading_space_is_stripped(line: bytes, data: str) -> None:
    assert parse(line + b"\n\n") == [SSEEvent(data)]


def test_comments_and_keepalives_are_ignored() -> None:
    raw = b": keep-alive\n\n:\n\n: OPENROUTER PROCESSING\ndata: x\n: mid-event comment\n\n"
    assert parse(raw) == [SSEEvent("x")]


def test_blank_lines_without_data_dispatch_nothing() -> None:
    assert parse(b"\n\n\r\n\r\r\n") == []


@pytest.mark.parametrize(
    "line", [b"id: 7", b"retry: 1000", b"model: gpt", b"Data: x", b" data: x", b"x"]
)
def test_other_fields_are_ignored(line: bytes) -> None:
    assert parse(b"data: a\n" + line + b"\ndata: b\n\n") == [SSEEvent("a\nb")]


def test_only_events_completed_by_this_chunk_are_returned() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: a\n\ndata: b\n") == [SSEEvent("a")]
    assert parser.feed(b"\ndata: c\n\n") == [SSEEvent("b"), SSEEvent("c")]
    assert parser.feed(b"") == []


# --- line endings --------------------------------------------------------------------------


@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"])
def test_each_line_ending(eol: bytes) -> None:
    raw = b"event: e" + eol + b"data: a" + eol + b"data: b" + eol + eol + b"data: c" + eol + eol
    assert parse(raw, close=False) == [SSEEvent("a\nb", "e"), SSEEvent("c")]


def test_mixed_line_endings() -> None:
    assert parse(b"data: a\r\ndata: b\rdata: c\n\r\n", close=False) == [SSEEvent("a\nb\nc")]


def test_cr_then_lf_in_the_next_chunk_is_one_line_ending() -> None:
    # An extra empty line here would split one event into two.
    assert parse(b"data: a\r", b"\ndata: b\r\n\r\n") == [SSEEvent("a\nb")]


def test_cr_then_lf_survives_an_empty_read_in_between() -> None:
    assert parse(b"data: a\r", b"", b"\ndata: b\n\n") == [SSEEvent("a\nb")]


def test_cr_at_chunk_end_followed_by_cr_is_a_blank_line() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: a\r") == []
    assert parser.feed(b"\r") == [SSEEvent("a")]


def test_only_the_lf_right_after_a_chunk_final_cr_is_swallowed() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: a\r") == []
    assert parser.feed(b"data: b\n") == []
    assert parser.feed(b"\n") == [SSEEvent("a\nb")]


def test_cr_inside_a_chunk_does_not_swallow_the_next_chunks_lf() -> None:
    # Only a CR that is the chunk's very last byte may pair with an LF in the next chunk.
    parser = SSEParser()
    assert parser.feed(b"data: a\rdata: b") == []
    assert parser.feed(b"\n\n") == [SSEEvent("a\nb")]


def test_lf_after_cr_then_blank_line_dispatches_on_the_second_lf() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: a\r") == []
    assert parser.feed(b"\n") == []
    assert parser.feed(b"\n") == [SSEEvent("a")]


@pytest.mark.parametrize("sep", ["\u2028", "\u2029", "\x85", "\x0b", "\x0c", "\x1c", "\x1e"])
def test_unicode_line_separators_are_not_line_endings(sep: str) -> None:
    text = f"a{sep}b"
    assert parse(f"data: {text}\n\n".encode()) == [SSEEvent(text)]


# --- bytes and decoding --------------------------------------------------------------------


def test_multibyte_character_split_across_reads() -> None:
    raw = "data: héllo 你好 🎉\n\n".encode()
    chunks = [raw[i : i + 1] for i in range(len(raw))]
    assert parse(*chunks) == [SSEEvent("héllo 你好 🎉")]


def test_undecodable_bytes_are_replaced_not_raised() -> None:
    assert parse(b"data: a\xffb\xe4\xbd\n\n") == [SSEEvent("a\ufffdb\ufffd")]


def test_truncated_character_before_a_line_ending_does_not_eat_the_ending() -> None:
    assert parse(b"data: \xf0\x9f\ndata: ok\n\n") == [SSEEvent("\ufffd\nok")]


def test_leading_bom_is_stripped() -> None:
    assert parse(b"\xef\xbb\xbfdata: x\n\n") == [SSEEvent("x")]


def test_leading_bom_split_across_reads_is_stripped() -> None:
    assert parse(b"\xef", b"\xbb", b"\xbfdata: x\n\n") == [SSEEvent("x")]


def test_bom_after_the_first_line_is_part_of_the_field_name() -> None:
    assert parse(b"data: a\n\n\xef\xbb\xbfdata: b\n\n") == [SSEEvent("a")]


def test_long_line_in_many_small_reads() -> None:
    payload = "x" * 50_000 + "é"
    raw = f"data: {payload}\n\n".encode()
    parser = SSEParser()
    events: list[SSEEvent] = []
    for i in range(0, len(raw), 7):
        events.extend(parser.feed(raw[i : i + 7]))
    assert events == [SSEEvent(payload)]


# --- partial lines and close() -------------------------------------------------------------


def test_has_partial_line_tracks_unterminated_bytes() -> None:
    parser = SSEParser()
    assert not parser.has_partial_line
    parser.feed(b'data: {"a"')
    assert parser.has_partial_line
    parser.feed(b": 1}\n")
    assert not parser.has_partial_line
    parser.feed(b"data: b\r")
    assert not parser.has_partial_line


def test_close_dispatches_data_seen_without_a_blank_line() -> None:
    parser = SSEParser()
    assert parser.feed(b"event: e\ndata: a\ndata: b\n") == []
    assert parser.close() == [SSEEvent("a\nb", "e")]


def test_close_dispatches_an_unterminated_final_line() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: x\n\ndata: [DONE]") == [SSEEvent("x")]
    assert parser.close() == [SSEEvent("[DONE]")]
    assert not parser.has_partial_line


def test_close_joins_an_unterminated_line_to_pending_data() -> None:
    assert parse(b"data: a\ndata: b") == [SSEEvent("a\nb")]


@pytest.mark.parametrize(
    "raw", [b"", b"data: a\n\n", b": comment", b"event: e\n", b"id: 1", b"\n\n"]
)
def test_close_without_pending_data_dispatches_nothing(raw: bytes) -> None:
    parser = SSEParser()
    parser.feed(raw)
    assert parser.close() == []


def test_parser_is_reusable_after_close() -> None:
    parser = SSEParser()
    parser.feed(b"\xef\xbb\xbfevent: e\ndata: a")
    assert parser.close() == [SSEEvent("a", "e")]
    # A fresh stream: no stale event name or data, and its BOM is stripped again.
    assert parser.feed(b"\xef\xbb\xbfdata: b\n\n") == [SSEEvent("b")]


# --- property: splitting a realistic stream anywhere changes nothing -------------------------


@dataclass(frozen=True)
class Line:
    text: str
    eol: str


TRICKY = st.sampled_from(
    ["héllo 你好 🎉", '{"content":"é"}', " leading", "a:b", "\u2028", "\x85", "", "[DONE]"]
)
VALUES = st.one_of(
    TRICKY,
    st.text(
        alphabet=st.characters(codec="utf-8", exclude_characters="\r\n"),
        max_size=12,
    ),
)
EOLS = st.sampled_from(["\n", "\r\n", "\r"])


@st.composite
def event_blocks(draw: st.DrawFn) -> tuple[list[Line], SSEEvent | None]:
    """One block of lines ending with a blank line, and the event it should produce."""
    lines: list[Line] = []
    name = draw(st.none() | st.sampled_from(["delta", "message", "error"]))
    if name is not None:
        lines.append(Line(f"event: {name}", draw(EOLS)))
    data: list[str] = []
    for value in draw(st.lists(VALUES, max_size=3)):
        if draw(st.booleans()):
            lines.append(Line(f"data: {value}", draw(EOLS)))
            data.append(value)
        else:
            lines.append(Line(f"data:{value}", draw(EOLS)))
            data.append(value[1:] if value.startswith(" ") else value)
        if draw(st.booleans()):
            lines.append(Line(draw(st.sampled_from([": keep-alive", ":", "id: 3"])), draw(EOLS)))
    lines.append(Line("", draw(EOLS)))
    return lines, (SSEEvent("\n".join(data), name) if data else None)


def serialize(lines: list[Line]) -> bytes:
    out: list[str] = []
    previous = ""
    for line in lines:
        eol = line.eol
        # "\r" then an empty line ending in "\n" is, on the wire, one CRLF: the encoding itself
        # is ambiguous, so a real server never emits it and neither does this generator.
        if previous == "\r" and not line.text and eol == "\n":
            eol = "\r\n"
        out.append(line.text + eol)
        previous = eol
    return "".join(out).encode()


@st.composite
def streams(draw: st.DrawFn) -> tuple[bytes, list[SSEEvent]]:
    lines: list[Line] = []
    expected: list[SSEEvent] = []
    for block, event in draw(st.lists(event_blocks(), min_size=1, max_size=6)):
        lines.extend(block)
        if event is not None:
            expected.append(event)
    return serialize(lines), expected


@settings(max_examples=300)
@given(stream=streams(), data=st.data())
def test_split_stream_parses_like_the_unsplit_stream(
    stream: tuple[bytes, list[SSEEvent]], data: st.DataObject
) -> None:
    raw, expected = stream
    cuts = data.draw(st.lists(st.integers(0, len(raw)), max_size=12))
    assert parse(raw) == expected
    assert parse(*split_at(raw, cuts)) == expected


@settings(max_examples=100)
@given(stream=streams())
def test_byte_at_a_time_parses_like_the_unsplit_stream(
    stream: tuple[bytes, list[SSEEvent]],
) -> None:
    raw, expected = stream
    assert parse(*(raw[i : i + 1] for i in range(len(raw)))) == expected


@settings(max_examples=200)
@given(raw=st.binary(max_size=200), data=st.data())
def test_arbitrary_bytes_never_raise_and_splitting_never_matters(
    raw: bytes, data: st.DataObject
) -> None:
    cuts = data.draw(st.lists(st.integers(0, len(raw)), max_size=8))
    assert parse(*split_at(raw, cuts)) == parse(raw)


# --- EventBuffer: the relay forwards whole events only ----------------------------------------

BIG = 1 << 30


def cut(*chunks: bytes, limit: int = BIG) -> list[bytes]:
    """What EventBuffer hands on for each read, then what `close` leaves."""
    buffer = EventBuffer(limit)
    return [buffer.feed(chunk) for chunk in chunks] + [buffer.close()]


def test_a_read_of_whole_events_is_handed_on_as_it_is() -> None:
    buffer = EventBuffer(BIG)
    chunk = b"data: a\n\ndata: b\n\n"
    assert buffer.feed(chunk) is chunk  # the hot path: no copy
    assert buffer.close() == b""


@pytest.mark.parametrize(
    "boundary", [b"\n\n", b"\r\n\r\n", b"\r\r", b"\n\r\n", b"\r\n\n", b"\r\r\n", b"\n\r"]
)
def test_every_blank_line_style_ends_an_event(boundary: bytes) -> None:
    assert cut(b"data: a" + boundary + b"data: b") == [b"data: a" + boundary, b"data: b"]


def test_the_start_of_an_event_is_held_until_its_blank_line() -> None:
    assert cut(b"data: a\n\ndata: {", b'"x": 1}\n', b"\n", b"data: c") == [
        b"data: a\n\n",
        b"",
        b'data: {"x": 1}\n\n',
        b"",
        b"data: c",
    ]


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (b"data: a\n", b"\n"),
        (b"data: a\r\n", b"\r\n"),
        (b"data: a\r\n\r", b"\n"),
        (b"data: a\r", b"\r"),
    ],
)
def test_a_boundary_split_across_reads_is_found(first: bytes, second: bytes) -> None:
    whole = first + second
    handed = cut(first, second + b"data: b")
    # A CRLF split by the read itself may stay split (its LF then opens the next piece).
    assert b"".join(handed) == whole + b"data: b"
    assert handed[-1] == b"data: b" or handed[-1] == b"\ndata: b"
    assert b"".join(handed[:2]) in (whole, whole[:-1])


def test_a_crlf_within_one_read_is_never_split() -> None:
    assert cut(b"data: a\r\n\r\ndata: b") == [b"data: a\r\n\r\n", b"data: b"]


def test_a_line_break_alone_is_no_boundary() -> None:
    assert cut(b"data: a\r\n", b"data: b\n", b"event: x\r") == [
        b"",
        b"",
        b"",
        b"data: a\r\ndata: b\nevent: x\r",
    ]


def test_an_event_over_the_limit_is_passed_on_as_it_comes() -> None:
    buffer = EventBuffer(8)
    assert buffer.feed(b"data: 1234") == b"data: 1234"
    assert buffer.mid_event
    assert buffer.feed(b"5678") == b""
    assert buffer.feed(b"\n\ndata: x") == b"5678\n\n"
    assert not buffer.mid_event
    assert buffer.close() == b"data: x"


def blank_line_ends(raw: bytes) -> set[int]:
    """Reference: the offset after every blank line that follows another line, found by
    walking the lines one terminator (CRLF, LF or CR) at a time."""
    ends: set[int] = set()
    i = line_start = 0
    while i < len(raw):
        if raw[i] in b"\r\n":
            step = 2 if raw[i : i + 2] == b"\r\n" else 1
            if i == line_start and line_start > 0:
                ends.add(i + step)
            i = line_start = i + step
        else:
            i += 1
    return ends


def check_cutting(raw: bytes, cuts: list[int]) -> None:
    reads = split_at(raw, cuts)
    buffer = EventBuffer(BIG)
    ends = blank_line_ends(raw)
    handed = received = 0
    pieces: list[bytes] = []
    for read in reads:
        piece = buffer.feed(read)
        received += len(read)
        if piece:
            pieces.append(piece)
            handed += len(piece)
            # Only ever cut after a blank line (or between the CR and LF of one).
            assert handed in ends or (
                handed + 1 in ends and raw[handed - 1 : handed + 1] == b"\r\n"
            )
        # Nothing whole is held back (but the LF of a CRLF the read split).
        held = [e for e in ends if handed < e <= received]
        assert held in ([], [handed + 1]), (held, handed)
        if held:
            assert raw[handed : handed + 1] == b"\n"
    rest = buffer.close()
    assert b"".join(pieces) + rest == raw
    # Every piece ends where an event ends: parsing up to it leaves nothing to dispatch.
    for k in range(1, len(pieces) + 1):
        assert parse(*pieces[:k]) == parse(*pieces[:k], close=False)


@settings(max_examples=300)
@given(stream=streams(), data=st.data())
def test_event_buffer_cuts_realistic_streams_only_between_events(
    stream: tuple[bytes, list[SSEEvent]], data: st.DataObject
) -> None:
    raw, _ = stream
    check_cutting(raw, data.draw(st.lists(st.integers(0, len(raw)), max_size=12)))


@settings(max_examples=300)
@given(raw=st.binary(max_size=60).map(lambda b: bytes(b"\r\n:a"[x % 4] for x in b)), data=st.data())
def test_event_buffer_cuts_any_line_soup_only_at_blank_lines(
    raw: bytes, data: st.DataObject
) -> None:
    check_cutting(raw, data.draw(st.lists(st.integers(0, len(raw)), max_size=12)))
