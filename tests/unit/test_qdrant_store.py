"""The shared Qdrant client: local mode serialised (it corrupts under threads otherwise)."""

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

from qdrant_client import models

from memory_bridge.sources.qdrant_store import collection_names, open_client


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
