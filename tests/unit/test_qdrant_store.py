"""The shared Qdrant client: local mode serialised (it corrupts under threads otherwise), its
namespace filters answered without the per-point interpreter, its commits write-ahead."""

from __future__ import annotations

import copy
import json
import random
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from qdrant_client import QdrantClient, models
from qdrant_client.local import local_collection

from memory_bridge.sources.qdrant_store import collection_names, open_client, string_equalities


def test_local_client_survives_concurrent_writers_and_readers(tmp_path: Path) -> None:
    client = open_client(tmp_path / "q", "", "")
    assert client.local and copy.deepcopy(client) is client and copy.copy(client) is client
    client.create_collection(
        "c", vectors_config=models.VectorParams(size=8, distance=models.Distance.COSINE)
    )

    def work(seed: int) -> None:
        rng = random.Random(seed)
        only_mine = models.Filter(
            must=[models.FieldCondition(key="u", match=models.MatchValue(value=seed))]
        )
        for _ in range(15):
            points = [
                models.PointStruct(
                    id=str(uuid.uuid4()),
                    vector=[rng.random() for _ in range(8)],
                    payload={"u": seed},
                )
                for _ in range(5)
            ]
            client.upsert("c", points=points)
            found = client.query_points(
                "c", query=[rng.random() for _ in range(8)], limit=3, query_filter=only_mine
            )
            assert all(p.payload == {"u": seed} for p in found.points)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(work, range(8)))  # re-raises any worker's error
    assert client.count("c").count == 8 * 15 * 5
    assert collection_names(client) == ["c"]
    client.close()


class _Version(BaseHTTPRequestHandler):
    """Answers qdrant-client's version check like a Qdrant server of the same version."""

    asked = threading.Event()

    def do_GET(self) -> None:
        body = json.dumps({"title": "qdrant", "version": version("qdrant-client")}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self.asked.set()

    def log_message(self, *args: object) -> None:
        pass


def test_server_mode_is_a_plain_thread_safe_client(tmp_path: Path) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Version)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        client = open_client(tmp_path / "unused", url, "")
        assert not client.local
        assert not (tmp_path / "unused").exists()
        assert _Version.asked.wait(10)  # the client checks the version in its own thread
        client.close()
    finally:
        server.shutdown()
        server.server_close()


# ---- the namespace filter's fast path (local mode has no payload index) -----------------

_VALUES: list[Any] = [
    "t1",
    "t1:ualice",
    "t2",
    "",
    ["t1", "x"],
    ["x"],
    [["t1"]],
    [],
    1,
    True,
    1.0,
    None,
    {"user_id": "t1"},
]


def _eq(key: str, value: Any) -> models.FieldCondition:
    return models.FieldCondition(key=key, match=models.MatchValue(value=value))


FAST = [
    models.Filter(must=[_eq("user_id", "t1")]),
    models.Filter(must=_eq("user_id", "t1:ualice")),  # one condition, not a list
    models.Filter(must=[_eq("user_id", "t1"), _eq("agent_id", "a")]),
    models.Filter(must=[_eq("user_id", "")]),
    models.Filter(must=[_eq("user_id", "nobody")]),
]
INTERPRETED = [
    None,
    models.Filter(must=[]),
    models.Filter(must=[_eq("user_id", 1)]),
    models.Filter(must=[_eq("user_id", True)]),
    models.Filter(must=[_eq("meta.user", "t1")]),
    models.Filter(must=[_eq("user_id", "t1")], must_not=[_eq("agent_id", "a")]),
    models.Filter(should=[_eq("user_id", "t1"), _eq("user_id", "t2")]),
    models.Filter(
        must=[models.FieldCondition(key="user_id", match=models.MatchAny(any=["t1", "t2"]))]
    ),
    models.Filter(must=[models.FieldCondition(key="n", range=models.Range(gte=2))]),
    models.Filter(must=[models.HasIdCondition(has_id=[1, 2, 3])]),
]


def test_only_string_equalities_on_plain_keys_take_the_fast_path() -> None:
    assert [string_equalities(f) for f in FAST] == [
        (("user_id", "t1"),),
        (("user_id", "t1:ualice"),),
        (("user_id", "t1"), ("agent_id", "a")),
        (("user_id", ""),),
        (("user_id", "nobody"),),
    ]
    assert [string_equalities(f) for f in INTERPRETED] == [None] * len(INTERPRETED)


def _fill(client: QdrantClient, seed: int) -> None:
    rng = random.Random(seed)
    client.create_collection(
        "c", vectors_config=models.VectorParams(size=8, distance=models.Distance.COSINE)
    )
    points = []
    for i in range(1, 301):
        payload: dict[str, Any] = {"n": i % 5}
        for key in ("user_id", "agent_id"):
            choice = rng.randrange(len(_VALUES) + 1)
            if choice < len(_VALUES):  # else: the key is missing
                payload[key] = copy.deepcopy(_VALUES[choice])
        if rng.random() < 0.3:
            payload["agent_id"] = "a"
        vector = [rng.uniform(-1, 1) for _ in range(8)]
        points.append(models.PointStruct(id=i, vector=vector, payload=payload))
    client.upsert("c", points=points)
    # Deleted points must stay out (the mask combines both).
    client.delete("c", points_selector=models.PointIdsList(points=list(range(1, 301, 7))))


def test_fast_path_answers_exactly_like_the_local_interpreter(tmp_path: Path) -> None:
    """The same data in our client and in a plain local client (the generic interpreter):
    every filter, fast or not, selects the same points in search, scroll and count."""
    ours = open_client(tmp_path / "ours", "", "")
    plain = QdrantClient(path=str(tmp_path / "plain"))
    for client in (ours, plain):
        _fill(client, seed=7)
    rng = random.Random(11)
    try:
        for flt in FAST + INTERPRETED:
            query = [rng.uniform(-1, 1) for _ in range(8)]
            found = [
                [
                    (p.id, p.score)
                    for p in c.query_points("c", query, query_filter=flt, limit=500).points
                ]
                for c in (ours, plain)
            ]
            assert found[0] == found[1], flt
            scrolled = [
                [p.id for p in c.scroll("c", scroll_filter=flt, limit=500)[0]]
                for c in (ours, plain)
            ]
            assert scrolled[0] == scrolled[1], flt
            counted = [c.count("c", count_filter=flt).count for c in (ours, plain)]
            assert counted[0] == counted[1] == len(scrolled[0]), flt
        # Not vacuous: the namespace filter selects some points, and not all of them.
        hits = ours.count("c", count_filter=FAST[0]).count
        assert 0 < hits < ours.count("c").count
    finally:
        ours.close()
        plain.close()


def test_namespace_filters_never_reach_the_per_point_interpreter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Loaded collections (opened from disk) and created ones alike; a plain local client
    would run the interpreter over every point."""
    calls: list[models.Filter] = []
    original = local_collection.calculate_payload_mask

    def counting(payloads: Any, payload_filter: Any, *args: Any, **kwargs: Any) -> Any:
        if payload_filter is not None:
            calls.append(payload_filter)
        return original(payloads, payload_filter, *args, **kwargs)

    monkeypatch.setattr(local_collection, "calculate_payload_mask", counting)
    client = open_client(tmp_path / "q", "", "")
    _fill(client, seed=3)
    client.close()

    client = open_client(tmp_path / "q", "", "")  # "c" is loaded from disk now
    client.create_collection(
        "d", vectors_config=models.VectorParams(size=8, distance=models.Distance.COSINE)
    )
    client.upsert(
        "d", points=[models.PointStruct(id=1, vector=[1.0] * 8, payload={"user_id": "t1"})]
    )
    for name in ("c", "d"):
        assert client.query_points(name, [1.0] * 8, query_filter=FAST[0], limit=5).points
        assert client.scroll(name, scroll_filter=FAST[0])[0]
        assert client.count(name, count_filter=FAST[0]).count
    assert calls == []
    client.count("c", count_filter=INTERPRETED[2])  # anything else: the interpreter, unchanged
    assert calls == [INTERPRETED[2]]
    client.close()

    plain = QdrantClient(path=str(tmp_path / "q"))
    plain.count("c", count_filter=FAST[0])
    assert calls[-1] == FAST[0]  # what the fast path saves
    plain.close()


def test_local_collections_commit_through_a_write_ahead_log(tmp_path: Path) -> None:
    """No fsync per committed point while the lock is held; the data survives a reopen."""

    def pragmas(client: Any, name: str) -> tuple[str, int]:
        connection = client._client._inner.collections[name].storage.storage
        mode = connection.execute("PRAGMA journal_mode").fetchone()[0]
        return mode, connection.execute("PRAGMA synchronous").fetchone()[0]

    client = open_client(tmp_path / "q", "", "")
    client.create_collection(
        "c", vectors_config=models.VectorParams(size=8, distance=models.Distance.COSINE)
    )
    client.upsert("c", points=[models.PointStruct(id=1, vector=[1.0] * 8, payload={"a": "b"})])
    assert pragmas(client, "c") == ("wal", 1)  # 1 = NORMAL
    client.close()
    client = open_client(tmp_path / "q", "", "")
    assert pragmas(client, "c") == ("wal", 1)
    assert [p.payload for p in client.scroll("c")[0]] == [{"a": "b"}]
    client.close()


def test_server_mode_collections_get_keyword_indexes_on_the_namespace_keys() -> None:
    """With a Qdrant server the namespace filter is served by a payload index: Mem0 asks for
    one on every collection it opens through a client it is given (as the pool does), new or
    existing. Guards that assumption across Mem0 upgrades."""
    from unittest.mock import MagicMock

    from mem0.vector_stores.qdrant import Qdrant  # type: ignore[import-untyped]

    for existing in ([], ["mb_t1_8d_x"]):
        client = MagicMock(spec=QdrantClient)
        client.get_collections.return_value = models.CollectionsResponse(
            collections=[models.CollectionDescription(name=n) for n in existing]
        )
        Qdrant(collection_name="mb_t1_8d_x", embedding_model_dims=8, client=client)
        indexed = {
            (c.kwargs["field_name"], c.kwargs["field_schema"])
            for c in client.create_payload_index.call_args_list
        }
        assert {("user_id", "keyword"), ("agent_id", "keyword"), ("run_id", "keyword")} <= indexed


# ---- namespace columns kept up to date as the collection changes -------------------------


def _random_payload(rng: random.Random) -> dict[str, Any]:
    payload: dict[str, Any] = {}
    for key in ("user_id", "agent_id"):
        choice = rng.randrange(len(_VALUES) + 1)
        if choice < len(_VALUES):
            payload[key] = copy.deepcopy(_VALUES[choice])
    return payload


def _change(client: QdrantClient, rng: random.Random, step: int) -> None:
    """One of the ways a collection's payloads change through the public API."""
    ids = sorted(int(p.id) for p in client.scroll("c", limit=10_000)[0])[:40]
    kind = step % 7
    if kind in (0, 1):  # new points, or points overwritten in place (same id)
        points = [
            models.PointStruct(
                id=rng.choice(ids) if kind else 1000 + step * 10 + i,
                vector=[rng.uniform(-1, 1) for _ in range(8)],
                payload=_random_payload(rng),
            )
            for i in range(rng.randrange(1, 4))
        ]
        client.upsert("c", points=points)
    elif kind == 2:
        client.set_payload("c", payload=_random_payload(rng), points=rng.sample(ids, 3))
    elif kind == 3:
        client.overwrite_payload("c", payload=_random_payload(rng), points=rng.sample(ids, 3))
    elif kind == 4:
        client.delete_payload("c", keys=["user_id"], points=rng.sample(ids, 2))
    elif kind == 5:
        client.clear_payload("c", points_selector=models.PointIdsList(points=rng.sample(ids, 2)))
    else:
        client.delete("c", points_selector=models.PointIdsList(points=rng.sample(ids, 2)))


def test_namespace_columns_follow_every_change_like_the_interpreter(tmp_path: Path) -> None:
    """Columns are built on the first search and then updated point by point: after every
    kind of change, every fast filter still selects exactly what the interpreter selects."""
    ours = open_client(tmp_path / "ours", "", "")
    plain = QdrantClient(path=str(tmp_path / "plain"))
    for client in (ours, plain):
        _fill(client, seed=5)
    rng = {id(c): random.Random(17) for c in (ours, plain)}
    try:
        for step in range(60):
            for client in (ours, plain):
                _change(client, rng[id(client)], step)
            for flt in FAST:
                counted = [c.count("c", count_filter=flt).count for c in (ours, plain)]
                scrolled = [
                    sorted(str(p.id) for p in c.scroll("c", scroll_filter=flt, limit=1000)[0])
                    for c in (ours, plain)
                ]
                assert counted[0] == counted[1] == len(scrolled[0]), (step, flt)
                assert scrolled[0] == scrolled[1], (step, flt)
        assert ours.count("c", count_filter=FAST[0]).count > 0
    finally:
        ours.close()
        plain.close()


def test_a_search_after_writes_does_not_revisit_every_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Mem0 searches before every write and every recall searches: after the first search of
    a namespace, appends and replacements update its column, nothing rescans the collection."""
    from memory_bridge.sources import qdrant_store

    scans: list[int] = []
    original = qdrant_store.equality_mask

    def counting(payloads: Any, pairs: Any) -> Any:
        scans.append(len(payloads))
        return original(payloads, pairs)

    monkeypatch.setattr(qdrant_store, "equality_mask", counting)
    client = open_client(tmp_path / "q", "", "")
    _fill(client, seed=9)
    only_t1 = FAST[0]
    before = client.count("c", count_filter=only_t1).count
    assert scans == [300]
    for i in range(20):
        client.upsert(
            "c",
            points=[
                models.PointStruct(id=500 + i, vector=[1.0] * 8, payload={"user_id": "t1"}),
                models.PointStruct(id=2 + i, vector=[1.0] * 8, payload={"user_id": "t2"}),
            ],
        )
    after = client.count("c", count_filter=only_t1).count
    assert scans == [300]  # appends and replacements updated the column: no rescan
    plain = {int(p.id) for p in client.scroll("c", scroll_filter=only_t1, limit=1000)[0]}
    assert len(plain) == after and set(range(500, 520)) <= plain and 3 not in plain
    assert after != before
    client.count("c", count_filter=FAST[2])  # (user_id, t1) is known; (agent_id, a) is new
    assert scans == [300, 320]
    client.close()


def test_indexed_payloads_drop_their_columns_on_any_other_list_change() -> None:
    from memory_bridge.sources.qdrant_store import IndexedPayloads, equality_mask

    def fresh() -> IndexedPayloads:
        rng = random.Random(3)
        return IndexedPayloads([_random_payload(rng) for _ in range(40)])

    changes: list[Any] = [
        lambda p: p.extend([{"user_id": "t1"}]),
        lambda p: p.insert(0, {"user_id": "t1"}),
        lambda p: p.pop(0),
        lambda p: p.remove(p[0]),
        lambda p: p.clear(),
        lambda p: p.sort(key=lambda d: str(d)),
        lambda p: p.reverse(),
        lambda p: p.__delitem__(0),
        lambda p: p.__iadd__([{"user_id": "t1"}]),
        lambda p: p.__imul__(2),
        lambda p: p.__setitem__(slice(0, 2), [{"user_id": "t1"}]),
        lambda p: p.__setitem__(-1, {"user_id": "t1"}),
        lambda p: p.append({"user_id": ["t1"]}),
    ]
    for change in changes:
        payloads = fresh()
        payloads.column("user_id", "t1")
        change(payloads)
        expected = equality_mask(list(payloads), (("user_id", "t1"),))
        assert list(payloads.column("user_id", "t1")) == list(expected)
    # Bounded: the least recently used namespace goes first.
    payloads = fresh()
    for i in range(IndexedPayloads.MAX_COLUMNS + 5):
        payloads.column("user_id", f"u{i}")
    assert len(payloads._columns) == IndexedPayloads.MAX_COLUMNS
    assert ("user_id", "u0") not in payloads._columns
