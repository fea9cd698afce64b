"""Provider keys sealed with Fernet, key sources and rotation, owner-only files, and URLs that
carry credentials refused at validation."""

from __future__ import annotations

import json
import logging
import stat
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet

from memory_bridge.tenancy.config import TokenConfigError, validate_config
from memory_bridge.tenancy.encryption import (
    SEALED_PREFIX,
    SecretCipher,
    SecretKeyError,
    UndecryptableSecret,
    add_new_key,
    load_cipher,
    read_key_file,
    retire_old_keys,
)
from memory_bridge.tenancy.private_files import private_dir, private_file, write_private

UPSTREAM = "sk-upstream-0123456789abcdef"
USER_KEY = "uk_gateway_0123456789abcdef"
BODY_KEY = "sk-in-a-body-0123456789abcdef"
CONFIG: dict[str, Any] = {
    "name": "agent",
    "llm_base_url": "http://127.0.0.1:9/v1",
    "llm_api_key": UPSTREAM,
    "memory_llm_body": {"model": "m", "api_key": BODY_KEY, "max_tokens": 9},
    "memory": {"gateway": {"baseUrl": "http://g", "userId": "u", "userKey": USER_KEY}},
}
SECRETS = (UPSTREAM, USER_KEY, BODY_KEY)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_seal_encrypts_every_secret_at_any_depth_and_nothing_else() -> None:
    cipher = SecretCipher.ephemeral()
    sealed = cipher.seal(CONFIG)
    text = json.dumps(sealed)
    for secret in SECRETS:
        assert secret not in text
    assert sealed["llm_api_key"].startswith(SEALED_PREFIX)
    assert sealed["memory"]["gateway"]["userKey"].startswith(SEALED_PREFIX)
    assert sealed["memory_llm_body"]["api_key"].startswith(SEALED_PREFIX)
    # Non-secrets stay readable (and equal), so the row is still inspectable.
    assert sealed["llm_base_url"] == CONFIG["llm_base_url"]
    assert sealed["memory_llm_body"]["max_tokens"] == 9
    assert sealed["memory"]["gateway"]["userId"] == "u"
    assert cipher.open(sealed) == CONFIG
    assert CONFIG["llm_api_key"] == UPSTREAM  # the input is not modified


def test_seal_clear_keeps_sealed_values_and_open_accepts_clear_ones() -> None:
    cipher = SecretCipher.ephemeral()
    half = {**cipher.seal(CONFIG), "llm_api_key": UPSTREAM}  # one value still in clear
    sealed = cipher.seal_clear(half)
    assert sealed["memory"]["gateway"]["userKey"] == half["memory"]["gateway"]["userKey"]
    assert sealed["llm_api_key"].startswith(SEALED_PREFIX)
    assert cipher.open(half) == CONFIG == cipher.open(sealed)
    # A plain value that happens to start like a sealed one is sealed too on the way in.
    odd = {"llm_api_key": SEALED_PREFIX + "not-a-token"}
    assert cipher.open(cipher.seal(odd)) == odd


def test_a_wrong_key_raises_without_the_value() -> None:
    sealed = SecretCipher.ephemeral().seal(CONFIG)
    with pytest.raises(UndecryptableSecret) as caught:
        SecretCipher.ephemeral().open(sealed)
    for secret in (*SECRETS, sealed["llm_api_key"]):
        assert secret not in str(caught.value)


def test_every_key_decrypts_and_reseal_moves_everything_to_the_first() -> None:
    old, new = Fernet.generate_key(), Fernet.generate_key()
    sealed_old = SecretCipher([old]).seal(CONFIG)
    both = SecretCipher([new, old])
    assert both.open(sealed_old) == CONFIG  # mid-rotation: old rows still load
    resealed = both.reseal({**sealed_old, "embed_api_key": "sk-clear-0123456789abcdef"})
    only_new = SecretCipher([new])
    assert only_new.open(resealed)["llm_api_key"] == UPSTREAM
    assert only_new.open(resealed)["embed_api_key"] == "sk-clear-0123456789abcdef"
    with pytest.raises(UndecryptableSecret):
        SecretCipher([old]).open(resealed)


def test_key_file_is_created_0600_in_a_0700_dir_and_reused(tmp_path: Path) -> None:
    key_file = tmp_path / "data" / "secret.key"
    first = load_cipher("", key_file)
    assert _mode(key_file) == 0o600 and _mode(key_file.parent) == 0o700
    assert len(read_key_file(key_file)) == 1
    sealed = first.seal(CONFIG)
    assert load_cipher("", key_file).open(sealed) == CONFIG
    assert [p.name for p in key_file.parent.iterdir()] == ["secret.key"]  # no staging left


def test_a_loose_key_file_is_tightened(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    key_file = tmp_path / "secret.key"
    key_file.write_text(Fernet.generate_key().decode() + "\n")
    key_file.chmod(0o644)
    with caplog.at_level(logging.WARNING):
        load_cipher("", key_file)
    assert _mode(key_file) == 0o600
    assert [r for r in caplog.records if "tightened" in r.getMessage()]


def test_the_environment_wins_and_may_hold_several_keys(tmp_path: Path) -> None:
    key_file = tmp_path / "secret.key"
    old, new = Fernet.generate_key(), Fernet.generate_key()
    sealed_old = SecretCipher([old]).seal(CONFIG)
    cipher = load_cipher(f" {new.decode()}, {old.decode()}\n", key_file)
    assert not key_file.exists()  # nothing written when the key comes from the environment
    assert cipher.open(sealed_old) == CONFIG
    assert SecretCipher([new]).open(cipher.seal(CONFIG)) == CONFIG


@pytest.mark.parametrize("value", ["not-a-key", "c2hvcnQ=", "A" * 40, "Ä" * 44])
def test_a_malformed_key_is_named_by_position_never_quoted(tmp_path: Path, value: str) -> None:
    with pytest.raises(SecretKeyError) as caught:
        load_cipher(f"{Fernet.generate_key().decode()},{value}", tmp_path / "k")
    assert "key 2" in str(caught.value) and value not in str(caught.value)
    with pytest.raises(SecretKeyError, match="holds no key"):
        load_cipher(" , ", tmp_path / "k")


def test_rotation_keeps_the_old_key_until_retired(tmp_path: Path) -> None:
    key_file = tmp_path / "secret.key"
    before = load_cipher("", key_file)
    sealed = before.seal(CONFIG)
    [old] = read_key_file(key_file)
    rotated = add_new_key(key_file)
    keys = read_key_file(key_file)
    assert len(keys) == 2 and keys[1] == old and _mode(key_file) == 0o600
    assert load_cipher("", key_file).open(sealed) == CONFIG  # an interrupted rotation is safe
    resealed = rotated.reseal(sealed)
    retire_old_keys(key_file)
    assert read_key_file(key_file) == keys[:1]
    assert load_cipher("", key_file).open(resealed) == CONFIG
    with pytest.raises(UndecryptableSecret):
        load_cipher("", key_file).open(sealed)


def test_private_dir_and_file_create_owner_only_and_tighten_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    made = tmp_path / "made" / "inner"
    private_dir(made)
    assert _mode(made) == 0o700
    private_file(made / "db")
    assert _mode(made / "db") == 0o600

    loose = tmp_path / "loose"
    loose.mkdir(mode=0o755)
    loose.chmod(0o755)
    (loose / "f").write_text("x")
    (loose / "f").chmod(0o664)
    with caplog.at_level(logging.WARNING):
        private_dir(loose)
        private_file(loose / "f")
        private_dir(loose)  # already tight: no second warning
        private_file(loose / "f")
    assert _mode(loose) == 0o700 and _mode(loose / "f") == 0o600
    assert (loose / "f").read_text() == "x"  # tightening never truncates
    assert len([r for r in caplog.records if "tightened" in r.getMessage()]) == 2


def test_write_private_replaces_a_file_as_0600(tmp_path: Path) -> None:
    target = tmp_path / "k"
    target.write_text("old")
    target.chmod(0o644)
    write_private(target, "new\n")
    assert target.read_text() == "new\n" and _mode(target) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k"]


# -- URLs carrying credentials ----------------------------------------------------------------

BAD_URLS = [
    "http://user:hunter2-secret@host/v1",
    "https://sk-abcdef0123456789@host",
    "http://host/v1?key=hunter2-secret",
    "http://host/v1?API_KEY=hunter2-secret",
    "http://host/v1?apikey=hunter2-secret",
    "http://host/v1?x-api-key=hunter2-secret",
    "http://host/v1?a=1&access_token=hunter2-secret",
    "http://host/v1?token=hunter2-secret",
    "http://host/v1?client_secret=hunter2-secret",
    "http://host/v1?password=hunter2-secret",
    "http://host/v1?sig=hunter2-secret",
    "http://host/v1?X-Amz-Signature=hunter2-secret",
]


@pytest.mark.parametrize("field", ["llm_base_url", "memory_llm_base_url", "embed_base_url"])
@pytest.mark.parametrize("url", BAD_URLS)
def test_urls_with_credentials_are_refused_naming_the_field(field: str, url: str) -> None:
    data = {"name": "t", "llm_base_url": "http://ok", field: url}
    with pytest.raises(TokenConfigError) as caught:
        validate_config(data)
    assert caught.value.field == field
    assert "hunter2" not in str(caught.value) and "sk-abc" not in str(caught.value)


@pytest.mark.parametrize(
    "url",
    [
        "http://host:8080/v1",
        "https://x.openai.azure.com/openai?api-version=2024-02-01",
        "http://h/?monkey=1",
    ],
)
def test_urls_without_credentials_are_accepted(url: str) -> None:
    assert validate_config({"name": "t", "llm_base_url": url}).llm_base_url == url.rstrip("/")
