"""Masking an export: e-mail addresses, phone numbers, card numbers and credentials scrubbed
from every text of an event's payload (the rules are listed in docs/operations.md).

Each match becomes a typed placeholder (`[email]`, `[phone]`, `[card]`, `[secret]`), so the
text keeps its shape and a reader sees what was there. The rules lean towards precision:
dates, times, versions, prices and ordinary numbers and words stay; a card number must pass
the Luhn check, a phone number needs a `+`, parentheses or a separated national form, a
long random-looking string needs letters and digits of high variety. What a pattern cannot
recognise (a password said in plain words) is not masked: masking lowers the risk of an export,
it does not make one anonymous.

End-user and session labels are masked with the same rules, with a keyed digest appended
(`[email]#3f2a9c1d`), so two masked users stay two users in the export; the key is random per
export, so the digest links nothing across exports.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import re
from collections import Counter
from collections.abc import Callable
from typing import Any

EMAIL, PHONE, CARD, SECRET = "[email]", "[phone]", "[card]", "[secret]"

# Payload fields that are ids of this install, never user text: left as they are.
ID_FIELDS = frozenset({"memory_id", "source_event_id", "kind", "role", "tool_call_id", "type"})
LABEL_FIELDS = frozenset({"user", "session"})

_KEY_VALUE = re.compile(
    r"(?i)\b(password|passwd|pwd|passphrase|secret|client[_-]?secret|api[_-]?key|apikey"
    r"|access[_-]?key|secret[_-]?key|auth[_-]?token|access[_-]?token|token)"
    r"(\s*[:=]\s*)(\"[^\"]*\"|'[^']*'|[^\s,;&]+)"
)
_BEARER = re.compile(r"(?i)\b(bearer|basic)(\s+)[A-Za-z0-9._~+/=-]{12,}")
_TOKENS = re.compile(
    r"\bsk-[A-Za-z0-9_-]{16,}"  # OpenAI, Anthropic (sk-ant-...), most OpenAI-compatible APIs
    r"|\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"  # AWS access key ids
    r"|\bgh[pousr]_[A-Za-z0-9]{30,}"  # GitHub
    r"|\bxox[abprs]-[A-Za-z0-9-]{10,}"  # Slack
    r"|\bAIza[A-Za-z0-9_-]{30,}"  # Google API keys
    r"|\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"  # JWTs
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----"
)
_EMAIL = re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b")
# 13 to 19 digits, single spaces or dashes between them: checked with Luhn before masking.
_CARD = re.compile(r"(?<![\w.,])\d(?:[ -]?\d){12,18}(?![\w.,]|[ -]\d)")
_PHONE = re.compile(
    # International: + then 8 to 15 digits, with spaces, dots, dashes or one (area).
    r"(?<![\w+])\+\d{1,3}(?:[ .-]?\(?\d{1,4}\)?){2,5}(?![\w])"
    # (area) local: (555) 123-4567, (030) 1234 5678
    r"|(?<![\w)])\(\d{2,5}\)[ .-]?\d{3,4}[ .-]?\d{3,5}(?![\w])"
    # North American: 555-123-4567, 555.123.4567
    r"|(?<![\w.-])\d{3}[.-]\d{3}[.-]\d{4}(?![\w]|[.-]\d)"
    # National with a trunk 0: 0151 2345 6789, 030-1234-5678, 020 7946 0958
    r"|(?<![\w.-])0\d{2,4}[ /-]\d{3,4}[ -]?\d{3,5}(?![\w]|[.-]\d)"
)
# Long hex (a digest, an API key): 32 or more hex digits with both letters and digits.
_HEX = re.compile(r"\b(?=[0-9a-fA-F]*\d)(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{32,}\b")
# Long base64-like runs, judged by `_random_looking`.
_BASE64 = re.compile(r"(?<![\w+/=-])[A-Za-z0-9+/_-]{32,}={0,2}(?![\w+/=-])")


def _luhn(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


def _card(match: re.Match[str]) -> str:
    digits = re.sub(r"\D", "", match.group(0))
    if 13 <= len(digits) <= 19 and _luhn(digits) and len(set(digits)) > 1:
        return CARD
    return match.group(0)


def _phone(match: re.Match[str]) -> str:
    # One group of a longer run of digit groups ("0000 0000 0000 0000", a table of numbers)
    # is no phone number.
    text, start, end = match.string, match.start(), match.end()
    before = text[max(0, start - 2) : start]
    after = text[end : end + 2]
    if re.fullmatch(r"\d[ .-]", before) or re.fullmatch(r"[ .-]\d", after):
        return match.group(0)
    return PHONE


def _entropy(text: str) -> float:
    counts = Counter(text)
    n = len(text)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


def _random_looking(match: re.Match[str]) -> str:
    run = match.group(0)
    body = run.rstrip("=")
    classes = (
        any(c.islower() for c in body),
        any(c.isupper() for c in body),
        any(c.isdigit() for c in body),
    )
    # A path or an identifier in words has few distinct characters for its length and long
    # letter-only stretches; a key drawn at random has neither.
    if all(classes) and _entropy(body) >= 4.2 and not re.search(r"[a-z]{8,}", body):
        return SECRET
    return run


def mask_text(text: str) -> str:
    """`text` with every match of the rules replaced by its placeholder."""
    if not text:
        return text
    text = _TOKENS.sub(SECRET, text)
    text = _KEY_VALUE.sub(lambda m: m.group(1) + m.group(2) + SECRET, text)
    text = _BEARER.sub(lambda m: m.group(1) + m.group(2) + SECRET, text)
    text = _EMAIL.sub(EMAIL, text)
    text = _CARD.sub(_card, text)
    text = _PHONE.sub(_phone, text)
    text = _HEX.sub(SECRET, text)
    return _BASE64.sub(_random_looking, text)


class Masker:
    """Masks payloads of one export: one random key for the digests of masked labels."""

    def __init__(self, key: bytes) -> None:
        self._key = key

    def label(self, value: str) -> str:
        masked = mask_text(value)
        if masked == value:
            return value
        digest = hmac.new(self._key, value.encode(), hashlib.sha256).hexdigest()[:8]
        return f"{masked}#{digest}"

    def payload(self, payload: dict[str, Any]) -> dict[str, Any]:
        return _walk(payload, self.label, None)  # type: ignore[no-any-return]


def _walk(value: Any, label: Callable[[str], str], field: str | None) -> Any:
    # Payloads are shallow (a turn's messages and their parts): recursion stays a few levels.
    if isinstance(value, str):
        if field in ID_FIELDS:
            return value
        return label(value) if field in LABEL_FIELDS else mask_text(value)
    if isinstance(value, dict):
        return {key: _walk(item, label, key) for key, item in value.items()}
    if isinstance(value, list):
        return [_walk(item, label, field) for item in value]
    return value
