"""What a Mem0 memory is as a point of the vector engine, and back. Pure: no Mem0 import.

A memory lives in its token's shard of model `mem0:<embedding model>` (`config.MODEL_PREFIX`):
Mem0's facts never share a shard with the episodic index. In the point:

- `user` is the end user of Mem0's `user_id` namespace (`""` for token-wide memories): the
  same tenant field the episodic index uses, so erasing an end user is one filter everywhere;
- `kind` is `mem0` (a memory) or `mem0-entity` (Mem0's entity store, used only with spaCy);
- `text` is Mem0's `data`; `session` its `run_id`; `event_id` the turn's event id Mem0 was
  given as metadata (`EVENT_ID_KEY`); `created_at` its creation time in seconds;
- `extra` is the rest of Mem0's payload as Mem0 wrote it (hash, timestamps, role, custom
  metadata), so a memory reads back exactly as it was stored.

Mem0's filters are mapped to a `Where`: `user_id`, `run_id` and `event_id` by the engine's
payload indexes; equality on any other key (`agent_id`, custom metadata) is checked on the
read payloads. Mem0's logical and range operators are refused: MemoryBridge never sends them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from memory_bridge.sources.longterm.config import end_user, namespace
from memory_bridge.vectors.index import JSONValue, PointPayload, StoredPoint, VectorPoint, Where

MEMORY_KIND = "mem0"
ENTITY_KIND = "mem0-entity"
# The metadata key tagging every memory with the event id of the turn it came from.
EVENT_ID_KEY = "event_id"
# What Mem0 itself keeps in a point's payload; any other key is custom metadata.
MEM0_KEYS = frozenset(
    {
        "data",
        "hash",
        "user_id",
        "agent_id",
        "run_id",
        "actor_id",
        "role",
        "created_at",
        "updated_at",
        "text_lemmatized",
        "attributed_to",
    }
)
_ANY = "*"


class UnsupportedFilter(ValueError):
    """A Mem0 filter this store does not evaluate."""


@dataclass(frozen=True, slots=True)
class StoredMemory:
    id: str
    text: str
    namespace: str
    created_at: str | None = None
    updated_at: str | None = None
    score: float | None = None
    metadata: dict[str, str] = field(default_factory=dict)  # custom keys given to an add


@dataclass(frozen=True, slots=True)
class Selection:
    """A Mem0 filter as the engine's `Where` plus what is checked on the read payloads."""

    where: Where
    equal: tuple[tuple[str, str], ...] = ()

    @property
    def user(self) -> str | None:
        """The one end user selected, if exactly one is."""
        return self.where.user if isinstance(self.where.user, str) else None

    def accepts(self, payload: Mapping[str, Any]) -> bool:
        return all(payload.get(key) == value for key, value in self.equal)


def to_point(
    token_id: int, kind: str, point_id: str, vector: Any, payload: Mapping[str, Any]
) -> VectorPoint:
    """Mem0's (id, vector, payload) as a point of the token's shard."""
    data = dict(payload)
    text = data.pop("data", "")
    ns = data.get("user_id")
    user = end_user(token_id, ns) if isinstance(ns, str) else ""
    if user is None:
        raise ValueError(f"memory {point_id}: user_id {ns!r} is not a namespace of this token")
    run_id, event_id = data.get("run_id"), data.get(EVENT_ID_KEY)
    return VectorPoint(
        id=point_id,
        dense=None if vector is None else [float(x) for x in vector],
        payload=PointPayload(
            user=user,
            kind=kind,
            text=text if isinstance(text, str) else str(text),
            session=run_id if isinstance(run_id, str) else None,
            event_id=event_id if isinstance(event_id, str) else None,
            created_at=_seconds(data.get("created_at")),
            extra=_json(data),
        ),
    )


def to_mem0(token_id: int, payload: PointPayload) -> dict[str, Any]:
    """A point's payload as Mem0 wrote it."""
    out: dict[str, Any] = dict(payload.extra)
    out["data"] = payload.text
    out.setdefault("user_id", namespace(token_id, payload.user))
    return out


def to_stored(token_id: int, point: StoredPoint, score: float | None = None) -> StoredMemory:
    return from_mem0_payload(point.id, to_mem0(token_id, point.payload), score)


def from_mem0_payload(
    point_id: str, data: Mapping[str, Any], score: float | None = None
) -> StoredMemory:
    """A memory from its payload as Mem0 wrote it (`to_mem0`)."""
    return StoredMemory(
        id=point_id,
        text=str(data.get("data") or ""),
        namespace=str(data.get("user_id") or ""),
        created_at=_opt_str(data.get("created_at")),
        updated_at=_opt_str(data.get("updated_at")),
        score=score,
        metadata={str(k): str(v) for k, v in data.items() if k not in MEM0_KEYS},
    )


def from_mem0_result(item: Mapping[str, Any]) -> StoredMemory:
    """One item of Mem0's `search`/`get` answer."""
    score = item.get("score")
    metadata = item.get("metadata") or {}
    return StoredMemory(
        id=str(item.get("id")),
        text=str(item.get("memory") or ""),
        namespace=str(item.get("user_id") or ""),
        created_at=_opt_str(item.get("created_at")),
        updated_at=_opt_str(item.get("updated_at")),
        score=float(score) if isinstance(score, int | float) else None,
        metadata={str(k): str(v) for k, v in metadata.items()},
    )


def select(token_id: int, kind: str, filters: Mapping[str, Any] | None) -> Selection:
    """Mem0's filter dict as a selection of the token's points of `kind`."""
    fields: dict[str, Any] = {"kind": kind}
    equal: list[tuple[str, str]] = []
    for key, raw in (filters or {}).items():
        values = _values(key, raw)
        if values is None:  # "*": any value
            continue
        if key == "user_id":
            users = [u for u in (end_user(token_id, v) for v in values) if u is not None]
            fields["user"] = _one_or_all(users)
        elif key == "run_id":
            fields["session"] = _one_or_all(values)
        elif key == EVENT_ID_KEY:
            fields["event_id"] = _one_or_all(values)
        elif len(values) == 1:
            equal.append((key, values[0]))
        else:
            raise UnsupportedFilter(f"filter on {key!r}: only one value is supported")
    return Selection(Where(**fields), tuple(equal))


def _values(key: str, raw: Any) -> list[str] | None:
    if isinstance(raw, dict):
        if set(raw) == {"eq"}:
            raw = raw["eq"]
        elif set(raw) == {"in"} and isinstance(raw["in"], list):
            raw = raw["in"]
        else:
            raise UnsupportedFilter(f"filter on {key!r}: operators {sorted(raw)} unsupported")
    if raw == _ANY:
        return None
    if key in ("AND", "OR", "NOT", "$and", "$or", "$not"):
        raise UnsupportedFilter(f"logical filter {key!r} unsupported")
    items = raw if isinstance(raw, list) else [raw]
    if not all(isinstance(v, str) for v in items):
        raise UnsupportedFilter(f"filter on {key!r}: only string values are supported")
    return list(items)


def _one_or_all(values: list[str]) -> str | tuple[str, ...]:
    return values[0] if len(values) == 1 else tuple(values)


def _seconds(value: object) -> float:
    if not isinstance(value, str):
        return 0.0
    try:
        return datetime.fromisoformat(value).timestamp()
    except ValueError:
        return 0.0


def _json(data: Mapping[str, Any]) -> dict[str, JSONValue]:
    convert: Callable[[Any], JSONValue] = _json_value
    return {str(k): convert(v) for k, v in data.items()}


def _json_value(value: Any) -> JSONValue:
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, list | tuple | set):
        return [_json_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    return str(value)


def _opt_str(value: object) -> str | None:
    return value if isinstance(value, str) else None
