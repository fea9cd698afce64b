"""Placement of recalled memory into what is forwarded upstream: one rule, two wire formats.

The rule (`Placement`), cache-stable first and dynamic last, so a provider's prompt cache keeps
hitting on everything before the one block that changes every turn:

  1. stable text: the curated snapshot and the sources' fixed rules (`Recall.system_blocks`),
     byte-identical from turn to turn while the curated documents do not change, appended to
     the system prompt (chat completions: the first leading system/developer message, or a new
     system message; Responses: `instructions`);
  2. session history, after the request's leading system/developer messages and before its
     own conversation;
  3. the request's own messages/items, as the client sent them (their original dicts: nothing
     the proxy does not own is re-encoded differently), with
  4. ONE dynamic block — the recalled long-term memories (rendered by the token's template)
     and the labelled Memory Gateway reference — as a `user` message immediately before the
     latest user message (so recalled text never enters a system prompt; see `splice` for a
     request without one).

A token may choose the hybrid design's layout instead (`memory.placement: "reference_first"`):
the same dynamic block placed right after the system messages, BEFORE the session history
(the Gateway reference "before persisted session history/current user input"). Every turn's
prompt then changes from that block on, so the history is never part of a cached prefix;
it is kept for deployments built around that order (docs/configuration.md).

`assemble` renders the rule for chat completions, `assemble_responses` for the Responses API;
both return None when nothing is injected (the client's bytes are forwarded as they are).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from memory_bridge.context.template import MemoryTemplate
from memory_bridge.core.messages import SYSTEM_ROLES, Message
from memory_bridge.core.responses_items import MESSAGE, history_items, user_item
from memory_bridge.sources.base import Recall
from memory_bridge.tenancy.forge_config import Placement as Layout

Item = TypeVar("Item")
_JOIN = "\n\n"


@dataclass(frozen=True, slots=True)
class Placement:
    """What one request gets, by place: stable text, history, the dynamic block."""

    stable: str
    history: tuple[Message, ...]
    dynamic: str

    @classmethod
    def of(cls, recalls: list[Recall], template: MemoryTemplate) -> Placement | None:
        """The placement of `recalls`, or None when there is nothing to inject."""
        stable = [b for r in recalls for b in r.system_blocks]
        memories = tuple(m for r in recalls for m in r.memories)
        dates = tuple(d for r in recalls for d in _dates(r))
        dynamic = [template.render(memories, dates)] if memories else []
        dynamic.extend(r.reference.text() for r in recalls if r.reference is not None)
        history = tuple(m for r in recalls for m in r.history)
        if not stable and not dynamic and not history:
            return None
        return cls(_JOIN.join(stable), history, _JOIN.join(d for d in dynamic if d))


def _dates(recall: Recall) -> tuple[float | None, ...]:
    """One date (or None) per memory of `recall`."""
    dates = recall.dates[: len(recall.memories)]
    return dates + (None,) * (len(recall.memories) - len(dates))


def splice(
    items: Sequence[Item],
    head: int,
    latest_user: int | None,
    history: list[Item],
    dynamic: Item | None,
    layout: Layout = "stable",
) -> list[Item]:
    """`items` with `history` after its first `head` (system) items and `dynamic` right before
    the latest user item (`reference_first`: right before the history).

    Without a user item (a request that only answers a tool call), `dynamic` goes before the
    history instead: anywhere later it could split a tool call from its output, which
    upstreams refuse. (No source recalls anything without a query today, and the query is the
    latest user text, so this is a guard.)
    """
    out = list(items[:head])
    if layout == "reference_first" or latest_user is None or latest_user < head:
        if dynamic is not None:
            out.append(dynamic)
        out.extend(history)
        out.extend(items[head:])
        return out
    out.extend(history)
    out.extend(items[head:latest_user])
    if dynamic is not None:
        out.append(dynamic)
    out.extend(items[latest_user:])
    return out


def _latest(items: Sequence[Item], is_user: Callable[[Item], bool]) -> int | None:
    for i in range(len(items) - 1, -1, -1):
        if is_user(items[i]):
            return i
    return None


# --- chat completions ----------------------------------------------------------------------


def assemble(
    raw_messages: list[dict[str, Any]],
    messages: tuple[Message, ...],
    recalls: list[Recall],
    template: MemoryTemplate,
    layout: Layout = "stable",
) -> list[dict[str, Any]] | None:
    """The messages to forward, or None when nothing is injected (forward the body as is)."""
    placement = Placement.of(recalls, template)
    if placement is None:
        return None
    head = 0
    while head < len(messages) and messages[head].role in SYSTEM_ROLES:
        head += 1
    latest = _latest(messages, lambda m: m.role == "user")
    history = [_history_dict(m) for m in placement.history]
    dynamic = {"role": "user", "content": placement.dynamic} if placement.dynamic else None
    out = splice(raw_messages, head, latest, history, dynamic, layout)
    if placement.stable:
        if head:
            out[0] = _append_text(out[0], placement.stable)
        else:
            out.insert(0, {"role": "system", "content": placement.stable})
    return out


def _append_text(message: dict[str, Any], text: str) -> dict[str, Any]:
    content = message.get("content")
    if isinstance(content, list):
        return {**message, "content": [*content, {"type": "text", "text": text}]}
    joined = f"{content}{_JOIN}{text}" if content else text
    return {**message, "content": joined}


def _history_dict(message: Message) -> dict[str, Any]:
    data = message.model_dump(exclude_none=True)
    if message.role == "assistant":
        data.setdefault("content", None)
    return data


# --- the Responses API ---------------------------------------------------------------------


def assemble_responses(
    body: dict[str, Any],
    recalls: list[Recall],
    template: MemoryTemplate,
    layout: Layout = "stable",
) -> dict[str, Any] | None:
    """The body to forward, or None when nothing is injected (forward the body as is).

    Only `instructions` and `input` change; every other field keeps its value and its place.
    A string `input` becomes the one user item it stands for when items must join it.
    """
    placement = Placement.of(recalls, template)
    if placement is None:
        return None
    out = dict(body)
    if placement.stable:
        instructions = body.get("instructions")
        stable = placement.stable
        out["instructions"] = f"{instructions}{_JOIN}{stable}" if instructions else stable
    if placement.history or placement.dynamic:
        raw = body.get("input")
        items: list[Any] = [user_item(raw)] if isinstance(raw, str) else list(raw or ())
        head = 0
        while head < len(items) and _role(items[head]) in SYSTEM_ROLES:
            head += 1
        latest = _latest(items, lambda item: _role(item) == "user")
        dynamic = user_item(placement.dynamic) if placement.dynamic else None
        history = history_items(placement.history)
        out["input"] = splice(items, head, latest, history, dynamic, layout)
    return out


def _role(item: Any) -> object:
    """The role of a message item; None for every other kind of item."""
    if isinstance(item, dict) and item.get("type", MESSAGE) == MESSAGE:
        return item.get("role")
    return None
