"""The masking rules of an export (docs/operations.md): what is scrubbed, and what must stay."""

from __future__ import annotations

import base64
import random

import pytest

from memory_bridge.lifecycle.masking import Masker, mask_text

MASKED = [
    ("write to jane.doe+news@example.co.uk today", "write to [email] today"),
    ("card 4111 1111 1111 1111 expires", "card [card] expires"),
    ("4111-1111-1111-1111", "[card]"),
    ("amex 378282246310005", "amex [card]"),
    ("call +49 30 1234 5678 now", "call [phone] now"),
    ("+1 (555) 123-4567", "[phone]"),
    ("(555) 123-4567", "[phone]"),
    ("ring 555-123-4567", "ring [phone]"),
    ("mobile 0151 2345 6789", "mobile [phone]"),
    ("my key is sk-proj-abcDEF1234567890abcdef", "my key is [secret]"),
    ("AKIAIOSFODNN7EXAMPLE", "[secret]"),
    ("Authorization: Bearer abcdef123456789XYZ", "Authorization: Bearer [secret]"),
    ("login with password=hunter2 please", "login with password=[secret] please"),
    ("api_key: 'two words'", "api_key: [secret]"),
    ("token=abc123", "token=[secret]"),
    ("sha 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", "sha [secret]"),
    ("aws secret wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "aws secret [secret]"),
    ("ghp_abcdefghijklmnopqrstuvwxyz0123456789", "[secret]"),
    (
        "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFU",
        "jwt [secret]",
    ),
]

KEPT = [
    "on 2024-01-15 at 10:30",
    "2024-01-15T10:30:00Z",
    "15.01.2024 and 10-20-2030",
    "version 3.11.4",
    "costs 1234567 dollars",
    "order 4111111111111112",  # 16 digits, not Luhn-valid
    "0000 0000 0000 0000",  # Luhn-valid, but no card
    "pi is 3.14159265358979",
    "the years 1999 and 2000",
    "room 101, floor 3",
    "ISBN 978-3-16-148410-0",
    "uuid 0b6f6c1e-4f0a-4d2b-9a8e-3c1d2e5f7a90",
    "see /usr/local/lib/python3.11/site-packages/foo",
    "internationalization localization",
    "counting 1 2 3 4 5 6 7 8 9 10 11 12 13",
    "https://example.com/docs/getting-started/installation",
    "my password is long and the token of appreciation",
    "tel 12345 or 1234 5678",
    "Users/JohnSmith2/Documents/Projects/MyApplication",
    "commit 7f3fa54",
    "IPv4 192.168.100.200",
    "",
]


@pytest.mark.parametrize(("text", "expected"), MASKED)
def test_what_is_masked(text: str, expected: str) -> None:
    assert mask_text(text) == expected


@pytest.mark.parametrize("text", KEPT)
def test_what_stays(text: str) -> None:
    assert mask_text(text) == text


def test_random_keys_are_masked() -> None:
    rng = random.Random(7)
    keys = [base64.b64encode(rng.randbytes(30)).decode() for _ in range(200)]
    masked = sum(mask_text(f"key {k} end") == "key [secret] end" for k in keys)
    assert masked >= 190  # a few drawn with a long lower-case run pass as words


def test_payloads_are_masked_everywhere_but_ids_and_labels_stay_distinct() -> None:
    masker = Masker(b"k" * 32)
    payload = {
        "user": "ann@example.com",
        "session": "s1",
        "memory_id": "0b6f6c1e4f0a4d2b9a8e3c1d2e5f7a90abc",
        "messages": [
            {"role": "user", "content": "mail ann@example.com, card 4111 1111 1111 1111"},
            {"role": "assistant", "content": [{"type": "text", "text": "sk-abcdefghijklmnop1234"}]},
        ],
    }
    out = masker.payload(payload)
    assert out["messages"][0]["content"] == "mail [email], card [card]"
    assert out["messages"][1]["content"][0] == {"type": "text", "text": "[secret]"}
    assert out["memory_id"] == payload["memory_id"] and out["session"] == "s1"
    assert out["user"].startswith("[email]#") and "ann" not in out["user"]
    other = masker.payload({**payload, "user": "bob@example.com"})["user"]
    assert other.startswith("[email]#") and other != out["user"]
    # Another export's key: the same user's digest differs, nothing links the two exports.
    assert Masker(b"x" * 32).payload(payload)["user"] != out["user"]
