"""schemathesis over every admin operation of the running proxy, from the schema it serves.

The schema is the one the proxy serves at `/openapi.json` to the admin token (what an operator
loads into an OpenAPI viewer). Every operation gets schema examples, the coverage
phase's boundary values (ids of 0, 2^63, -1, over-long strings ...) and a bounded number of
generated requests, valid and invalid, with a fixed seed. Each response must be no 5xx, carry a
documented status, content type and body shape, reject what the schema says is invalid, and
answer an undeclared method with 405 and `Allow`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from memory_bridge.http.admin.schemas import MAX_DB_ID
from memory_bridge.server.app import create_app
from tests.support.admin_routers import admin_operations
from tests.support.longterm_support import chat, memories, memory_fields, wait_until
from tests.support.proxy import Proxy, make_settings, start_proxy

EXAMPLES = 30  # generated requests per operation and generation mode, beyond the fixed phases
SEED = 20_251_123
CLOSED_URL = "http://127.0.0.1:9"  # the discard port: nothing listens, the connection is refused
# The checks that matter here; the stateful ones (use-after-free and the like) need links the
# schema does not declare, and `positive_data_acceptance` would need every cross-field rule
# of a token config (e.g. long-term memory settings all or none) expressed in JSON Schema.
CHECKS = (
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_schema_conformance",
    "response_headers_conformance",
    "negative_data_rejection",
    "unsupported_method",
    "allow_header_conformance",
    "ignored_auth",
)


@pytest.fixture(scope="module")
def fuzzed(
    tmp_path_factory: pytest.TempPathFactory, upstream_server: tuple[object, str]
) -> Iterator[Proxy]:
    server, proxy = start_proxy(tmp_path_factory.mktemp("fuzz") / "data", upstream_server[1])
    try:
        yield proxy
    finally:
        server.stop()


# What the generated ids may point at, refreshed for every operation (a previous operation may
# have deleted or rotated it): read by the hook below while Hypothesis draws.
LIVE: dict[str, list[Any]] = {"token_id": [], "memory_token": [], "memory_id": []}


@pytest.fixture
def live(fuzzed: Proxy) -> None:
    """Fresh things to find: a token with a curated document and audit events (its Gateway is
    a closed port), and one with long-term memory holding a memory (the fake upstream serves
    its LLM and embedder)."""
    gateway = {"mode": "hybrid", "gateway": {"baseUrl": CLOSED_URL, "userId": "u", "userKey": "k"}}
    plain_id, plain = fuzzed.create_token(name="plain", memory=gateway)
    assert fuzzed.admin("PUT", f"/tokens/{plain_id}/curated/memory", content=b"# Facts").is_success
    assert chat(fuzzed, plain, "hello", user="alice").status_code == 200
    memory_id, memory = fuzzed.create_token(name="mem", **memory_fields(fuzzed.upstream_url))
    assert chat(fuzzed, memory, "My bike is green", user="alice").status_code == 200
    found = wait_until(lambda: memories(fuzzed, memory_id), what="the seeded memory")
    LIVE["token_id"] = [plain_id, memory_id]
    LIVE["memory_token"] = [memory_id]
    LIVE["memory_id"] = [found[0]["id"]]


def _admin_schema() -> schemathesis.BaseSchema:
    # Built from the app object (schemathesis parametrizes at import time, before any server
    # runs); `test_the_proxy_serves_the_fuzzed_schema` shows the proxy serves this very schema.
    # The app is only built: no lifespan runs, nothing is read from this data directory.
    app = create_app(make_settings(Path("unused-data-dir")))
    config: dict[str, Any] = {
        "seed": SEED,
        "generation": {
            "mode": "all",
            "max-examples": EXAMPLES,
            "deterministic": True,
            "database": "none",
            # Admin bodies refuse NUL (PostgreSQL cannot store it); the schema says so in words.
            "allow-x00": False,
            # Unknown query parameters are ignored, as documented (docs/admin-api.md).
            "allow-extra-parameters": False,
            # The admin token is sent with every call; `ignored_auth` tries it missing or wrong.
            "with-security-parameters": False,
        },
        "checks": {"enabled": False, **{name: {"enabled": True} for name in CHECKS}},
    }
    schema = schemathesis.openapi.from_dict(
        app.openapi(), config=schemathesis.Config.from_dict(config)
    )
    return schema.include(path_regex=r"^/v1/admin/")


schema = _admin_schema()


@schema.hook
def flatmap_path_parameters(
    context: schemathesis.HookContext, path_parameters: dict[str, Any] | None
) -> st.SearchStrategy[dict[str, Any] | None]:
    """Let a valid generated id be one that exists, so success paths are fuzzed too.

    Only ids the schema accepts are swapped (for another the schema accepts): a case meant to be
    invalid stays invalid.
    """
    if not path_parameters:
        return st.just(path_parameters)
    # A memory is found only under the token holding it.
    live = {**LIVE, "token_id": LIVE["memory_token"]} if "memory_id" in path_parameters else LIVE
    drawn = {}
    for name, value in path_parameters.items():
        if live.get(name) and _valid(name, value):
            # Twice: an id that exists is drawn more often than the one generated.
            drawn[name] = st.sampled_from([value, *live[name], *live[name]])
        else:
            drawn[name] = st.just(value)
    return st.fixed_dictionaries(drawn)


@schema.hook
def filter_body(context: schemathesis.HookContext, body: object) -> bool:
    # A markdown document is text: a number or a list "violating" its string schema goes on
    # the wire as the text of it, which is a valid document, not invalid data.
    markdown = context.operation is not None and context.operation.path.endswith("/{kind}")
    return isinstance(body, str) or not markdown


def _valid(name: str, value: object) -> bool:
    if name == "token_id":
        return type(value) is int and 1 <= value <= MAX_DB_ID
    try:
        UUID(str(value))
    except ValueError:
        return False
    return True


@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
def test_every_admin_operation_conforms_to_its_schema(
    case: schemathesis.Case, fuzzed: Proxy, live: None
) -> None:
    case.call_and_validate(base_url=fuzzed.url, headers=fuzzed.admin_headers)


@pytest.fixture(scope="module")
def served_schema(fuzzed: Proxy) -> dict[str, Any]:
    reply = httpx.get(f"{fuzzed.url}/openapi.json", headers=fuzzed.admin_headers, timeout=30)
    assert reply.status_code == 200, reply.text
    served: dict[str, Any] = reply.json()
    return served


def test_the_proxy_serves_the_fuzzed_schema(served_schema: dict[str, Any]) -> None:
    assert served_schema == schema.raw_schema


def test_the_fuzzed_schema_covers_every_admin_route(served_schema: dict[str, Any]) -> None:
    # If an admin route fell out of the schema, the fuzzing above would silently skip it.
    operations = {
        f"{method.upper()} {path}"
        for path, item in served_schema["paths"].items()
        if path.startswith("/v1/admin/")
        for method in item
    }
    assert operations == admin_operations()
    assert len(operations) >= 14
