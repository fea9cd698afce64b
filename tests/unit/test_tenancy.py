from __future__ import annotations

import pytest

from memory_bridge.tenancy.config import (
    TokenConfigError,
    config_secrets,
    merge_patch,
    validate_config,
)
from memory_bridge.tenancy.secrets import digest, mask, mask_secrets, new_secret, scrub

BASE = {"name": "t", "llm_base_url": "http://up.example/v1/"}


def test_urls_with_and_without_v1_reach_the_same_endpoint() -> None:
    with_v1 = validate_config(BASE)
    without = validate_config({**BASE, "llm_base_url": "http://up.example"})
    assert with_v1.chat_url() == without.chat_url() == "http://up.example/v1/chat/completions"
    assert without.api_url("models") == "http://up.example/v1/models"


def test_merge_patch_validates_the_result() -> None:
    config = validate_config({**BASE, "memory_limit": 3})
    assert merge_patch(config, {"memory_limit": 7}).memory_limit == 7
    with pytest.raises(TokenConfigError) as info:
        merge_patch(config, {"memory_limit": 0})
    assert info.value.field == "memory_limit"
    with pytest.raises(TokenConfigError):
        merge_patch(config, ["not", "an", "object"])
    with pytest.raises(TokenConfigError):
        validate_config("nope")


def test_secrets_are_masked_at_any_depth_and_collected() -> None:
    config = validate_config(
        {
            **BASE,
            "llm_api_key": "sk-aaaaaaaaaaaaaaaa1234",
            "embed_body": {"nested": [{"api_key": "short"}], "max_tokens": 5},
            "memory": {
                "mode": "hybrid",
                "gateway": {"baseUrl": "http://g", "userId": "u", "userKey": "uk_0123456789abcdef"},
            },
        }
    )
    shown = mask_secrets(config.model_dump(exclude_none=True))
    assert shown["llm_api_key"] == "sk-...1234"
    assert shown["embed_body"] == {"nested": [{"api_key": "***"}], "max_tokens": 5}
    assert shown["memory"]["gateway"]["userKey"] == "uk_...cdef"
    assert set(config_secrets(config)) == {
        "sk-aaaaaaaaaaaaaaaa1234",
        "short",
        "uk_0123456789abcdef",
    }
    assert mask_secrets({"password": 5}) == {"password": "***"}


def test_secret_helpers() -> None:
    a, b = new_secret(), new_secret()
    assert a != b and a.startswith("mb-") and len(a) > 40
    assert digest(a) != digest(b) and len(digest(a)) == 64
    assert mask("short") == "***"
    assert scrub(RuntimeError("key sk-live-1 leaked"), ["sk-live-1", ""]) == "key *** leaked"
