"""Query lanes: callers that find every lane busy share the next forward pass, never more
passes run at once than there are lanes, a caller alone runs at once, and a failed pass fails
every caller in it."""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import numpy.typing as npt
import pytest

from memory_bridge.embedding.lanes import Lanes, Query
from memory_bridge.embedding.local import SHARED_MAX_CHARS, _Loaded

WAIT = 10.0


class RecordingEncoder:
    """Vectors that name their text ([len(text), index in the pass]); the first pass blocks
    until released, so that later callers pile up behind it."""

    def __init__(self, fail_on: str | None = None) -> None:
        self.passes: list[list[str]] = []
        self.running = 0
        self.most_at_once = 0
        self.first_started = threading.Event()
        self.release = threading.Event()
        self._lock = threading.Lock()
        self._fail_on = fail_on

    def encode(self, texts: list[str]) -> npt.NDArray[np.float32]:
        with self._lock:
            self.passes.append(list(texts))
            self.running += 1
            self.most_at_once = max(self.most_at_once, self.running)
            first = len(self.passes) == 1
        if first:
            self.first_started.set()
            assert self.release.wait(WAIT)
        with self._lock:
            self.running -= 1
        if self._fail_on in texts:
            raise RuntimeError("the model failed")
        return np.array([[len(t), n] for n, t in enumerate(texts)], dtype=np.float32)


def _call(lanes: Lanes, encoder: RecordingEncoder, text: str) -> list[float]:
    query = Query(text, text.encode(), Future())
    lanes.run(encoder, query, lambda q, v: None)
    return query.result.result(WAIT)


def _wait_for_waiters(lanes: Lanes, count: int) -> None:
    # The callers are queued once the lane's condition holds them all.
    for _ in range(1000):
        if len(lanes._waiting) == count:
            return
        threading.Event().wait(0.01)
    raise AssertionError(f"{count} callers never waited")


def test_callers_behind_a_busy_lane_share_one_pass() -> None:
    lanes, encoder = Lanes(lanes=1, batch=8), RecordingEncoder()
    with ThreadPoolExecutor(max_workers=5) as pool:
        first = pool.submit(_call, lanes, encoder, "a")
        assert encoder.first_started.wait(WAIT)
        later = [pool.submit(_call, lanes, encoder, "b" * n) for n in range(2, 6)]
        _wait_for_waiters(lanes, 4)
        encoder.release.set()
        assert first.result(WAIT) == [1.0, 0.0]
        vectors = [f.result(WAIT) for f in later]
    assert [v[0] for v in vectors] == [2.0, 3.0, 4.0, 5.0]  # each caller its own text's vector
    assert len(encoder.passes) == 2  # one pass alone, then the four waiting texts in one
    assert sorted(encoder.passes[1]) == sorted("b" * n for n in range(2, 6))
    assert encoder.most_at_once == 1


def test_a_pass_takes_at_most_batch_texts() -> None:
    lanes, encoder = Lanes(lanes=1, batch=2), RecordingEncoder()
    with ThreadPoolExecutor(max_workers=6) as pool:
        first = pool.submit(_call, lanes, encoder, "a")
        assert encoder.first_started.wait(WAIT)
        rest = [pool.submit(_call, lanes, encoder, f"t{n}") for n in range(5)]
        _wait_for_waiters(lanes, 5)
        encoder.release.set()
        assert first.result(WAIT)[0] == 1.0
        assert all(f.result(WAIT)[0] == 2.0 for f in rest)
    assert [len(texts) for texts in encoder.passes] == [1, 2, 2, 1]
    embedded = sorted(t for texts in encoder.passes for t in texts)
    assert embedded == ["a"] + [f"t{n}" for n in range(5)]


def test_a_second_lane_runs_beside_a_busy_one() -> None:
    lanes, encoder = Lanes(lanes=2, batch=8), RecordingEncoder()
    with ThreadPoolExecutor(max_workers=2) as pool:
        first = pool.submit(_call, lanes, encoder, "a")
        assert encoder.first_started.wait(WAIT)
        assert _call(lanes, encoder, "bb") == [2.0, 0.0]  # while the first pass still runs
        assert encoder.most_at_once == 2
        encoder.release.set()
        assert first.result(WAIT) == [1.0, 0.0]


def test_a_failed_pass_fails_every_caller_in_it_and_frees_its_lane() -> None:
    lanes, encoder = Lanes(lanes=1, batch=8), RecordingEncoder(fail_on="bad")
    with ThreadPoolExecutor(max_workers=3) as pool:
        first = pool.submit(_call, lanes, encoder, "a")
        assert encoder.first_started.wait(WAIT)
        doomed = [pool.submit(_call, lanes, encoder, text) for text in ("bad", "ok")]
        _wait_for_waiters(lanes, 2)
        encoder.release.set()
        assert first.result(WAIT) == [1.0, 0.0]
        for future in doomed:
            with pytest.raises(RuntimeError, match="the model failed"):
                future.result(WAIT)
    assert _call(lanes, encoder, "after") == [5.0, 0.0]  # the lane is free again


def test_lanes_and_batch_are_at_least_one() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        Lanes(lanes=0, batch=8)
    with pytest.raises(ValueError, match="at least 1"):
        Lanes(lanes=1, batch=0)


def test_a_long_query_does_not_wait_for_the_shared_lane() -> None:
    encoder = RecordingEncoder()
    loaded = _Loaded(None, 2, None, 1, encoder)  # the recording encoder as its ONNX encoder
    long = "a long question " * (SHARED_MAX_CHARS // 10)
    with ThreadPoolExecutor(max_workers=2) as pool:
        short = pool.submit(loaded.encode, ["a short question"])
        assert encoder.first_started.wait(WAIT)  # the shared lane is busy until released
        assert loaded.encode([long]) == [[float(len(long)), 0.0]]
        encoder.release.set()
        assert short.result(WAIT) == [[16.0, 0.0]]
    assert encoder.passes == [["a short question"], [long]]
