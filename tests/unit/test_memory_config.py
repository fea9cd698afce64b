"""The token field `memory`: every validation rule, both key spellings, a key that never leaks."""

from __future__ import annotations

import math
from typing import Any

import pydantic
import pytest

from memory_bridge.tenancy.config import TokenConfigError
from memory_bridge.tenancy.memory_config import (
    DEFAULT_SCOPE,
    GatewayConfig,
    MemoryConfig,
    gateway_status,
    parse_memory_config,
)

KEY = "uk_super_secret_value_0123456789"


def gw(**overrides: Any) -> dict[str, Any]:
    """A complete camelCase gateway block; an override of None removes the key."""
    block: dict[str, Any] = {"baseUrl": "http://127.0.0.1:8010", "userId": "u1", "userKey": KEY}
    block.update(overrides)
    return {k: v for k, v in block.items() if v is not None}


def error(raw: object) -> TokenConfigError:
    with pytest.raises(TokenConfigError) as info:
        parse_memory_config(raw)
    assert KEY not in str(info.value)
    assert KEY not in repr(info.value)
    return info.value


# -- implicit and explicit modes ---------------------------------------------------------------


@pytest.mark.parametrize("raw", [None, {}, {"mode": None}, {"gateway": None}])
def test_no_memory_section_is_implicit_hybrid_with_the_gateway_off(raw: object) -> None:
    cfg = parse_memory_config(raw)
    assert cfg == MemoryConfig(mode="hybrid", explicit=False, gateway=None)
    assert not cfg.gateway_active
    # A fresh token has nothing wrong with it: no Gateway is a state, not a fault (issue 23).
    assert gateway_status(cfg) == "off (no gateway configured)"


def test_implicit_hybrid_with_complete_credentials_is_active() -> None:
    cfg = parse_memory_config({"gateway": gw()})
    assert cfg.mode == "hybrid"
    assert cfg.explicit is False
    assert cfg.gateway is not None
    assert gateway_status(cfg) == "active"


@pytest.mark.parametrize("missing", ["baseUrl", "userId", "userKey"])
@pytest.mark.parametrize("how", ["absent", "null", "empty", "blank"])
def test_implicit_hybrid_with_incomplete_credentials_degrades(missing: str, how: str) -> None:
    block = gw()
    if how == "absent":
        del block[missing]
    else:
        block[missing] = {"null": None, "empty": "", "blank": "   "}[how]
    cfg = parse_memory_config({"gateway": block})
    assert cfg == MemoryConfig(explicit=False, gateway_incomplete=True)
    assert gateway_status(cfg) == "degraded: no gateway credentials"


def test_implicit_incomplete_block_still_validates_what_is_given() -> None:
    err = error({"gateway": {"userKey": KEY, "topK": 0}})
    assert err.field == "memory.gateway.topK"
    assert error({"gateway": {"baseUrl": "ftp://x"}}).field == "memory.gateway.baseUrl"
    assert error({"gateway": {"userId": "u", "bogus": 1}}).field == "memory.gateway.bogus"


def test_explicit_hybrid() -> None:
    cfg = parse_memory_config({"mode": "hybrid", "gateway": gw()})
    assert cfg.explicit is True
    assert cfg.gateway_active
    assert gateway_status(cfg) == "active"


def test_explicit_hybrid_requires_a_gateway_block() -> None:
    assert error({"mode": "hybrid"}).field == "memory.gateway"
    assert error({"mode": "hybrid", "gateway": None}).field == "memory.gateway"


@pytest.mark.parametrize("missing", ["baseUrl", "userId", "userKey"])
@pytest.mark.parametrize("value", [None, "", "  "])
def test_explicit_hybrid_requires_each_credential(missing: str, value: str | None) -> None:
    err = error({"mode": "hybrid", "gateway": gw(**{missing: value})})
    assert err.field == f"memory.gateway.{missing}"
    assert "required" in str(err)


def test_error_names_the_key_as_spelled() -> None:
    block = {"base_url": "http://h", "user_id": "u", "user_key": ""}
    assert error({"mode": "hybrid", "gateway": block}).field == "memory.gateway.user_key"
    assert error({"mode": "hybrid", "gateway": gw(top_k=0)}).field == "memory.gateway.top_k"


@pytest.mark.parametrize(
    "block", [gw(), {"scope": 5, "topK": -1}, "not an object", {"unknown": True}]
)
def test_curated_ignores_any_gateway_block(block: object) -> None:
    cfg = parse_memory_config({"mode": "curated", "gateway": block})
    assert cfg == MemoryConfig(mode="curated", explicit=True, gateway=None)
    assert gateway_status(cfg) == "off (curated mode)"


def test_curated_mode_cannot_carry_a_gateway() -> None:
    complete = parse_memory_config({"gateway": gw()}).gateway
    with pytest.raises(pydantic.ValidationError):
        MemoryConfig(mode="curated", gateway=complete)


# -- shape ----------------------------------------------------------------------------------


@pytest.mark.parametrize("raw", ["hybrid", [], 3, True])
def test_memory_must_be_an_object(raw: object) -> None:
    assert error(raw).field == "memory"


@pytest.mark.parametrize("mode", ["Hybrid", "Off", "none", "", 1, ["hybrid"]])
def test_mode_must_be_curated_hybrid_or_off(mode: object) -> None:
    assert error({"mode": mode, "gateway": gw()}).field == "memory.mode"


def test_off_is_a_passthrough_without_a_gateway() -> None:
    cfg = parse_memory_config({"mode": "off", "gateway": gw()})
    assert cfg.passthrough and cfg.explicit
    assert cfg.gateway is None
    assert gateway_status(cfg).startswith("off")
    assert not parse_memory_config({"mode": "curated"}).passthrough
    assert not parse_memory_config(None).passthrough


@pytest.mark.parametrize("block", ["x", [], 1])
def test_gateway_must_be_an_object(block: object) -> None:
    assert error({"gateway": block}).field == "memory.gateway"


def test_unknown_keys_are_errors() -> None:
    err = error({"mode": "hybrid", "gateway": gw(), "extra": 1})
    assert err.field == "memory.extra"
    assert "unknown field" in str(err)
    assert error({"gateway": gw(topk=3)}).field == "memory.gateway.topk"


def test_same_field_in_both_spellings_is_an_error() -> None:
    err = error({"gateway": gw(top_k=3, topK=3)})
    assert err.field in ("memory.gateway.top_k", "memory.gateway.topK")
    assert "twice" in str(err)


# -- key spellings and defaults -------------------------------------------------------------


def test_camel_and_snake_case_parse_the_same() -> None:
    camel = {
        "baseUrl": "https://gw.example/api/",
        "userId": "u1",
        "userKey": KEY,
        "appId": "app",
        "projectId": "proj",
        "singleEndUser": True,
        "scope": ["all_user_memory"],
        "topK": 3,
        "timeoutSeconds": 2.5,
    }
    snake = {
        "base_url": "https://gw.example/api/",
        "user_id": "u1",
        "user_key": KEY,
        "app_id": "app",
        "project_id": "proj",
        "single_end_user": True,
        "scope": ["all_user_memory"],
        "top_k": 3,
        "timeout_seconds": 2.5,
    }
    mixed: dict[str, Any] = {
        "baseUrl": "https://gw.example/api/",
        "user_id": "u1",
        "userKey": KEY,
        "app_id": "app",
    }
    mixed |= {"projectId": "proj", "singleEndUser": True, "scope": ["all_user_memory"]}
    mixed |= {"top_k": 3, "timeoutSeconds": 2.5}
    a, b, c = (parse_memory_config({"mode": "hybrid", "gateway": x}) for x in (camel, snake, mixed))
    assert a == b == c
    g = a.gateway
    assert g is not None
    assert g.base_url == "https://gw.example/api"  # trailing slash dropped, path kept
    assert (g.user_id, g.user_key.get_secret_value()) == ("u1", KEY)
    assert (g.app_id, g.project_id) == ("app", "proj")
    assert (g.scope, g.top_k, g.timeout_seconds) == (("all_user_memory",), 3, 2.5)


def test_defaults() -> None:
    g = parse_memory_config({"mode": "hybrid", "gateway": gw()}).gateway
    assert g is not None
    assert (g.app_id, g.project_id) == ("default", "default")
    assert g.scope == DEFAULT_SCOPE == ("current_chat", "resources")
    assert g.top_k == 8
    assert g.timeout_seconds == 10.0


def test_null_values_mean_default() -> None:
    g = parse_memory_config({"gateway": gw(appId=None, topK=None)}).gateway
    assert g is not None
    assert (g.app_id, g.top_k) == ("default", 8)


def test_config_is_frozen() -> None:
    cfg = parse_memory_config({"gateway": gw()})
    assert cfg.gateway is not None
    with pytest.raises(pydantic.ValidationError):
        cfg.gateway.top_k = 9
    with pytest.raises(pydantic.ValidationError):
        cfg.mode = "curated"


# -- field rules ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "scope",
    [
        ["current_chat"],
        ["resources", "current_chat"],
        ["current_chat", "resources", "all_user_memory"],
    ],
)
def test_scope_accepts_non_empty_subsets(scope: list[str]) -> None:
    g = parse_memory_config({"gateway": gw(scope=scope, singleEndUser=True)}).gateway
    assert g is not None
    assert g.scope == tuple(scope)


@pytest.mark.parametrize(
    ("scope", "field"),
    [
        ([], "memory.gateway.scope"),
        ("current_chat", "memory.gateway.scope"),
        ({"current_chat": True}, "memory.gateway.scope"),
        (["current_chat", "current_chat"], "memory.gateway.scope"),
        (["everything"], "memory.gateway.scope[0]"),
        (["resources", 1], "memory.gateway.scope[1]"),
    ],
)
def test_scope_rejects(scope: object, field: str) -> None:
    assert error({"gateway": gw(scope=scope)}).field == field


@pytest.mark.parametrize("top_k", [1, 8, 100])
def test_top_k_accepts_1_to_100(top_k: int) -> None:
    g = parse_memory_config({"gateway": gw(topK=top_k)}).gateway
    assert g is not None
    assert g.top_k == top_k


@pytest.mark.parametrize("top_k", [0, -1, 101, "8", 8.0, 1.5, True])
def test_top_k_rejects(top_k: object) -> None:
    assert error({"gateway": gw(topK=top_k)}).field == "memory.gateway.topK"


@pytest.mark.parametrize("timeout", [0.001, 1, 10, 2.5])
def test_timeout_accepts_positive_numbers(timeout: float) -> None:
    g = parse_memory_config({"gateway": gw(timeoutSeconds=timeout)}).gateway
    assert g is not None
    assert g.timeout_seconds == float(timeout)
    assert isinstance(g.timeout_seconds, float)


@pytest.mark.parametrize("timeout", [0, -1, -0.5, "10", True, math.inf, math.nan, [1]])
def test_timeout_rejects(timeout: object) -> None:
    assert error({"gateway": gw(timeoutSeconds=timeout)}).field == "memory.gateway.timeoutSeconds"


@pytest.mark.parametrize("url", ["http://127.0.0.1:8010", "https://gw.example", "http://h/base/"])
def test_base_url_accepts_http_and_https(url: str) -> None:
    g = parse_memory_config({"gateway": gw(baseUrl=url)}).gateway
    assert g is not None
    assert g.base_url == url.rstrip("/")


@pytest.mark.parametrize(
    "url",
    [
        "ftp://gw.example",
        "gw.example:8010",
        "http://",
        "http:///path",
        f"http://u1:{KEY}@gw.example",
        f"http://{KEY}@gw.example",
        "http://gw.example/?token=x",
        "http://gw.example/#frag",
        12,
    ],
)
def test_base_url_rejects(url: object) -> None:
    assert error({"mode": "hybrid", "gateway": gw(baseUrl=url)}).field == "memory.gateway.baseUrl"


@pytest.mark.parametrize("key", ["userId", "appId", "projectId"])
@pytest.mark.parametrize("value", ["", " ", 7, ["x"]])
def test_text_fields_must_be_non_blank_strings(key: str, value: object) -> None:
    assert error({"mode": "hybrid", "gateway": gw(**{key: value})}).field == f"memory.gateway.{key}"


@pytest.mark.parametrize("value", [7, ["k"], {"k": 1}, True])
def test_user_key_must_be_a_string(value: object) -> None:
    assert error({"gateway": gw(userKey=value)}).field == "memory.gateway.userKey"


# -- the userKey never leaks ----------------------------------------------------------------


def test_user_key_absent_from_repr_str_and_json_dump() -> None:
    cfg = parse_memory_config({"mode": "hybrid", "gateway": gw()})
    assert cfg.gateway is not None
    for text in (
        repr(cfg),
        str(cfg),
        repr(cfg.gateway),
        str(cfg.gateway),
        f"{cfg}",
        str(cfg.model_dump()),
        cfg.model_dump_json(),
        str(cfg.gateway.user_key),
    ):
        assert KEY not in text
    assert "user_key" not in repr(cfg.gateway)
    assert cfg.gateway.user_key.get_secret_value() == KEY  # still usable by the client


@pytest.mark.parametrize(
    "raw",
    [
        {"mode": "hybrid", "gateway": gw(baseUrl=f"http://u:{KEY}@h")},
        {"mode": "hybrid", "gateway": gw(userId="")},
        {"mode": "hybrid", "gateway": gw(topK=KEY)},
        {"mode": "hybrid", "gateway": gw(scope=[KEY])},
        {"mode": "hybrid", "gateway": gw(timeoutSeconds=KEY)},
        {"mode": KEY, "gateway": gw()},
        {"mode": "hybrid", "gateway": {"userKey": KEY}},
        {"mode": "hybrid", "gateway": gw(userKey=[KEY])},
    ],
)
def test_user_key_absent_from_errors(raw: object) -> None:
    err = error(raw)  # error() asserts KEY is in neither str nor repr
    # No chained pydantic error (which quotes the input) shows up in a logged traceback.
    assert err.__cause__ is None
    assert err.__context__ is None or err.__suppress_context__


def test_configs_with_different_keys_differ() -> None:
    # A rotated userKey must count as a config change (e.g. for a cached per-token client).
    a = GatewayConfig(base_url="http://h", user_id="u", user_key=pydantic.SecretStr("k1"))
    b = GatewayConfig(base_url="http://h", user_id="u", user_key=pydantic.SecretStr("k2"))
    assert a != b


def test_all_user_memory_needs_a_token_that_serves_one_end_user() -> None:
    """The whole Gateway user's memory is every end user's of the token: refused unless the
    operator states the token serves one end user."""
    for scope in (["all_user_memory"], ["current_chat", "all_user_memory"]):
        with pytest.raises(TokenConfigError) as refused:
            parse_memory_config({"gateway": gw(scope=scope)})
        assert refused.value.field == "memory.gateway.scope"
        assert "singleEndUser" in str(refused.value)
        with pytest.raises(TokenConfigError):
            parse_memory_config({"gateway": gw(scope=scope, singleEndUser=False)})
        g = parse_memory_config({"gateway": gw(scope=scope, singleEndUser=True)}).gateway
        assert g is not None and g.single_end_user
    with pytest.raises(TokenConfigError) as refused:
        parse_memory_config({"gateway": gw(singleEndUser="yes")})
    assert refused.value.field == "memory.gateway.singleEndUser"
    g = parse_memory_config({"gateway": gw()}).gateway
    assert g is not None and not g.single_end_user
