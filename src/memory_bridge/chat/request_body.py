"""A chat request's JSON body, parsed once and strictly where the proxy depends on it.

Strict where a lenient parse would store or forward something broken: nesting deeper than
`MAX_DEPTH` (Python's parser would otherwise recurse into a `RecursionError` near 1,000),
text that is not valid Unicode (bytes that are not UTF-8, or a lone surrogate escape such as
`\\udc80`, which would be half-stored: the database refuses it after the upstream answered),
and a `messages` key given twice (which one a parser keeps differs between the proxy and the
upstream). Each check costs nothing unless the body could fail it: counts of brackets, of
escapes and of the key are taken on the raw bytes first.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from memory_bridge.errors import invalid_request

MAX_DEPTH = 400
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89abcdefABCDEF]")
_MESSAGES_KEY = b'"messages"'


def parse_chat_body(raw: bytes) -> dict[str, Any]:
    """The body as a dict, or a 4xx `ProxyError` saying what is wrong with it."""
    duplicates = raw.count(_MESSAGES_KEY) > 1
    try:
        body = json.loads(raw, object_pairs_hook=_refuse_duplicate_messages if duplicates else None)
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


def _refuse_duplicate_messages(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs) and sum(1 for key, _ in pairs if key == "messages") > 1:
        raise invalid_request("The request body gives 'messages' more than once.")
    return out


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
