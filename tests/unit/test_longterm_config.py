"""From token config to Mem0 config: namespaces, shards, providers, validation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memory_bridge.sources.longterm import config as mc
from memory_bridge.tenancy.config import TokenConfigError, merge_patch, validate_config

BASE = {"name": "t", "llm_base_url": "http://llm"}
MEMORY = {
    "memory_llm_provider": "openai",
    "memory_llm_base_url": "http://llm.local:8000",
    "memory_llm_api_key": "sk-memory-0123456789",
    "memory_llm_body": {"model": "qwen", "temperature": 0.0},
    "embed_provider": "openai",
    "embed_base_url": "http://embed.local/v1/",
    "embed_api_key": "sk-embed-0123456789",
    "embed_dims": 64,
    "embed_body": {"model": "bge-small"},
}


def _config(**fields: Any) -> Any:
    return validate_config({**BASE, **MEMORY, **fields})


def _spec(**fields: Any) -> mc.Mem0Spec:
    return mc.build_spec(7, _config(**fields), Path("/data/mem0"))


def test_namespace_is_the_token_id_plus_an_encoded_end_user() -> None:
    assert mc.namespace(7, "") == "t7"
    assert mc.namespace(7, "alice") == "t7:ualice"
    assert mc.namespace(7, "Ann Lee") == "t7:uAnn%20Lee"  # Mem0 rejects whitespace in ids
    assert mc.end_user(7, "t7") == ""
    assert mc.end_user(7, "t7:uAnn%20Lee") == "Ann Lee"
    assert mc.end_user(7, "t70") is None and mc.end_user(7, "t8:ualice") is None


@given(token=st.integers(min_value=1, max_value=10**9), user=st.text(max_size=200))
def test_namespaces_round_trip_and_never_collide(token: int, user: str) -> None:
    ns = mc.namespace(token, user)
    assert not any(c.isspace() for c in ns)
    assert mc.end_user(token, ns) == user
    assert mc.end_user(token + 1, ns) is None


def test_shards_belong_to_an_embedding_space_apart_from_episodic_ones() -> None:
    spec = _spec()
    assert (spec.token_id, spec.model_id, spec.dims) == (7, "mem0:bge-small", 64)
    assert _spec(embed_dims=32).dims == 32
    assert _spec(embed_body={"model": "other"}).model_id == "mem0:other"
    # Keys and URLs do not change the space: the same model behind a new URL keeps memories.
    assert _spec(embed_base_url="http://elsewhere", embed_api_key="k2").model_id == spec.model_id
    assert spec.model_id.startswith(mc.MODEL_PREFIX)
    assert spec.history_path == Path("/data/mem0/history/t7.db")


def test_fingerprint_covers_instance_fields_only() -> None:
    spec = _spec()
    assert _spec(memory_limit=9, memory_prompt="x").fingerprint == spec.fingerprint
    assert _spec(memory_llm_api_key="sk-other-0123456789").fingerprint != spec.fingerprint
    assert _spec(embed_body={"model": "bge-small", "x": 1}).fingerprint != spec.fingerprint


def test_openai_compatible_provider_blocks() -> None:
    spec = _spec()
    assert spec.llm == {
        "provider": "openai",
        "config": {
            "model": "qwen",
            "temperature": 0.0,
            "api_key": "sk-memory-0123456789",
            "openai_base_url": "http://llm.local:8000/v1",
        },
    }
    assert spec.embedder == {
        "provider": "openai",
        "config": {
            "model": "bge-small",
            "api_key": "sk-embed-0123456789",
            "openai_base_url": "http://embed.local/v1",
            "embedding_dims": 64,
        },
    }
    assert spec.local_model is None and spec.send_dimensions is True
    assert set(spec.secrets) == {"sk-memory-0123456789", "sk-embed-0123456789"}


def test_other_providers_get_their_own_base_url_key_and_never_the_environment_key() -> None:
    spec = _spec(
        memory_llm_provider="vllm",
        memory_llm_api_key=None,
        embed_provider="huggingface",
        embed_base_url="http://tei:8080",
        embed_api_key=None,
    )
    assert spec.llm["config"]["vllm_base_url"] == "http://llm.local:8000/v1"
    assert spec.llm["config"]["api_key"] == mc.NO_KEY
    assert spec.embedder is not None
    assert spec.embedder["config"]["huggingface_base_url"] == "http://tei:8080/v1"
    assert spec.embedder["config"]["api_key"] == mc.NO_KEY
    ollama = _spec(memory_llm_provider="ollama", memory_llm_base_url="http://ollama:11434/v1")
    assert ollama.llm["config"]["ollama_base_url"] == "http://ollama:11434"
    with pytest.raises(mc.Mem0ConfigError, match="takes no base URL"):
        _spec(memory_llm_provider="groq")
    with pytest.raises(mc.Mem0ConfigError, match="takes no base URL"):
        _spec(embed_provider="gemini")


def test_explicit_fields_win_over_the_body_and_send_dimensions_is_ours() -> None:
    spec = _spec(
        memory_llm_body={"model": "m", "api_key": "from-body", "openai_base_url": "http://x"},
        embed_body={"model": "e", "embedding_dims": 3, "send_dimensions": False},
    )
    assert spec.llm["config"]["api_key"] == "sk-memory-0123456789"
    assert spec.llm["config"]["openai_base_url"] == "http://llm.local:8000/v1"
    assert spec.embedder is not None
    # Not told the size, Mem0's embedders send none (OpenAI's `dimensions` included).
    assert "embedding_dims" not in spec.embedder["config"]
    assert "send_dimensions" not in spec.embedder["config"] and spec.send_dimensions is False
    told = _spec(embed_body={"model": "e", "embedding_dims": 3})
    assert told.embedder is not None and told.embedder["config"]["embedding_dims"] == 64
    keyless = _spec(memory_llm_api_key=None, memory_llm_body={"api_key": "from-body"})
    assert keyless.llm["config"]["api_key"] == "from-body"
    with pytest.raises(mc.Mem0ConfigError, match="send_dimensions"):
        _spec(embed_body={"send_dimensions": "no"})


def test_local_embedder_spec() -> None:
    spec = _spec(embed_provider="local", embed_base_url=None, embed_api_key=None, embed_body=None)
    assert spec.embedder is None and spec.local_model == mc.LocalModel(path="")
    assert "embedder local sentence-transformers/all-MiniLM-L6-v2" in spec.describe
    custom = _spec(
        embed_provider="huggingface",
        embed_base_url=None,
        embed_body={"model": "/models/e5", "model_kwargs": {"device": "cpu"}},
    )
    assert custom.local_model == mc.LocalModel("/models/e5", '{"device": "cpu"}')
    assert custom.local_model.kwargs == {"device": "cpu"}
    assert custom.model_id == "mem0:/models/e5" != spec.model_id
    with pytest.raises(mc.Mem0ConfigError, match=r"embed_body\.dimensions"):
        _spec(embed_provider="local", embed_base_url=None, embed_body={"dimensions": 3})
    with pytest.raises(mc.Mem0ConfigError, match="model_kwargs"):
        _spec(embed_provider="local", embed_base_url=None, embed_body={"model_kwargs": [1]})
    with pytest.raises(mc.Mem0ConfigError, match="model must be a string"):
        _spec(embed_provider="local", embed_base_url=None, embed_body={"model": 5})


def test_describe() -> None:
    assert mc.describe(validate_config(BASE)) == "off: no memory LLM/embedder configured"
    assert mc.describe(_config()) == (
        "on (memory LLM openai qwen; embedder openai bge-small, 64 dims; limit 5)"
    )
    assert mc.describe(_config(memory_llm_provider="groq")).startswith("misconfigured:")
    with pytest.raises(mc.Mem0ConfigError):
        mc.build_spec(1, validate_config(BASE), Path())


@pytest.mark.parametrize(
    ("drop", "field", "named"),
    [
        (["embed_dims"], "embed_dims", ["embed_dims"]),
        (
            ["embed_provider", "embed_dims"],
            "embed_provider",
            ["embed_provider", "embed_dims"],
        ),
    ],
)
def test_partial_memory_config_names_every_missing_field(
    drop: list[str], field: str, named: list[str]
) -> None:
    data = {k: v for k, v in {**BASE, **MEMORY}.items() if k not in drop}
    with pytest.raises(TokenConfigError) as info:
        validate_config(data)
    assert info.value.field == field
    assert all(name in str(info.value) for name in named)


def test_an_embedder_without_a_memory_llm_is_episodic_only() -> None:
    embedder_only = {k: v for k, v in MEMORY.items() if not k.startswith("memory_llm")}
    config = validate_config({**BASE, **embedder_only})
    assert not mc.enabled(config)  # no Mem0
    assert config.embed_provider == MEMORY["embed_provider"]
    with pytest.raises(TokenConfigError) as info:
        validate_config({**BASE, **embedder_only, "embed_dims": None})
    assert info.value.field == "embed_dims" and "the embedder" in str(info.value)


def test_memory_config_rules() -> None:
    # Keys, URLs and bodies alone switch nothing on.
    assert validate_config({**BASE, "embed_api_key": "k", "memory_llm_body": {}})
    # The openai provider without a base URL means api.openai.com: it needs a key.
    with pytest.raises(TokenConfigError) as info:
        _config(memory_llm_base_url=None, memory_llm_api_key=None)
    assert info.value.field == "memory_llm_api_key"
    with pytest.raises(TokenConfigError) as info:
        _config(embed_base_url=None, embed_api_key=None)
    assert info.value.field == "embed_api_key"
    assert _config(memory_llm_base_url=None)  # a key is enough
    with pytest.raises(TokenConfigError) as info:
        _config(embed_provider="local")
    assert info.value.field == "embed_base_url"
    # PATCH: clearing one required field is rejected, clearing all of them is fine.
    config = _config()
    with pytest.raises(TokenConfigError):
        merge_patch(config, {"embed_dims": None})
    cleared = merge_patch(config, dict.fromkeys(MEMORY))
    assert not mc.enabled(cleared)
