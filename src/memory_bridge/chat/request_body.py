"""A proxied request's JSON body, parsed once and strictly where the proxy depends on it.

Strict where a lenient parse would store or forward something broken: nesting deeper than
`MAX_DEPTH` (Python's parser would otherwise recurse into a `RecursionError` near 1,000),
text that is not valid Unicode (bytes that are not UTF-8, or a lone surrogate escape such as
`\\udc80`, which would be half-stored: the database refuses it after the upstream answered),
and a key the proxy reads given twice (`messages` of a chat completion; `input`, `instructions`
and `previous_response_id` of a Responses request: which one a parser keeps differs between the
proxy and the upstream). Each check costs nothing unless the body could fail it: counts of
brackets, of escapes and of the keys are taken on the raw bytes first.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from typing import Any

from memory_bridge.core.errors import invalid_request

MAX_DEPTH = 400
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89abcdefABCDEF]")
_KEY_ESCAPE = re.compile(rb"\\u00[4-7][0-9a-fA-F]")
Keys = tuple[tuple[str, bytes], ...]


def _keys(*names: str) -> Keys:
    return tuple((name, f'"{name}"'.encode()) for name in names)


CHAT_KEYS = _keys("messages")
RESPONSES_KEYS = _keys("input", "instructions", "previous_response_id")


def parse_chat_body(raw: bytes) -> dict[str, Any]:
    """A chat completion's body as a dict, or a 4xx `ProxyError` saying what is wrong."""
    return parse_body(raw, CHAT_KEYS)


def parse_responses_body(raw: bytes) -> dict[str, Any]:
    """A Responses request's body as a dict, or a 4xx `ProxyError` saying what is wrong."""
    return parse_body(raw, RESPONSES_KEYS)


def parse_body(raw: bytes, keys: Keys) -> dict[str, Any]:
    """The body as a dict, or a 4xx `ProxyError`; none of `keys` may be given twice."""
    # A key can also be spelled with escapes (`"previous\\u005fresponse_id"`): then counting
    # its plain spelling proves nothing, and every object is checked as it is parsed. (Only an
    # escaped letter or `_` can spell one; text escaped by `ensure_ascii` escapes none.)
    escaped = _KEY_ESCAPE.search(raw) is not None
    repeated = [name for name, quoted in keys if escaped or raw.count(quoted) > 1]
    try:
        body = json.loads(raw, object_pairs_hook=_refuse_repeated(repeated) if repeated else None)
    except UnicodeDecodeError:
        raise invalid_request("The request body is not JSON text in UTF-8.") from None
    except RecursionError:
        raise _too_deep() from None
    except json.JSONDecodeError:
        raise invalid_request("The request body is not valid JSON.", 400) from None
    if not isinstance(body, dict):
        raise invalid_request("The request body must be a JSON object.", 400)
    if raw.count(b"[") + raw.count(b"{") > MAX_DEPTH and _depth(body) > MAX_DEPTH:
        raise _too_deep()
    if _SURROGATE_ESCAPE.search(raw) and _has_lone_surrogate(body):
        raise invalid_request("The request body holds text that is not valid Unicode.")
    return body


def _refuse_repeated(keys: list[str]) -> Callable[[list[tuple[str, Any]]], dict[str, Any]]:
    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out = dict(pairs)
        if len(out) != len(pairs):
            for key in keys:
                if sum(1 for name, _ in pairs if name == key) > 1:
                    raise invalid_request(f"The request body gives '{key}' more than once.")
        return out

    return hook


def _too_deep() -> Exception:
    return invalid_request(f"The request body is nested deeper than {MAX_DEPTH} levels.")


def _depth(value: Any) -> int:
    """The nesting depth of containers, without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children: Iterable[Any]
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > deepest:
            deepest = depth
            if deepest > MAX_DEPTH:
                return deepest
        stack.extend((child, depth + 1) for child in children)
    return deepest


def _has_lone_surrogate(body: dict[str, Any]) -> bool:
    # A valid pair was already combined by the parser: any surrogate left is a lone one.
    try:
        json.dumps(body, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False
