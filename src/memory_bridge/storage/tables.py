"""Table definitions. Every memory-bearing row is keyed by the stable token id."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    func,
)

metadata = MetaData()

# BigInteger on PostgreSQL, INTEGER on SQLite (where only INTEGER PRIMARY KEY autoincrements).
BigId = BigInteger().with_variant(Integer(), "sqlite")

tokens = Table(
    "tokens",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", String(200), nullable=False),
    Column("is_admin", Boolean, nullable=False, default=False),
    Column("secret_hash", String(64), nullable=False, unique=True),
    Column("config", Text, nullable=True),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    # A deleted token's id must never be handed out again: it names a memory namespace.
    sqlite_autoincrement=True,
)

messages = Table(
    "messages",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("token_id", Integer, nullable=False),
    Column("user_id", String(200), nullable=False),
    Column("session_id", String(200), nullable=False),
    Column("role", String(20), nullable=False),
    Column("body", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Index("ix_messages_scope", "token_id", "user_id", "session_id", "id"),
)

events = Table(
    "events",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("token_id", Integer, nullable=False),
    Column("user_id", String(200), nullable=False),
    Column("session_id", String(200), nullable=False),
    Column("type", String(80), nullable=False),
    Column("request_id", String(16), nullable=False),
    Column("data", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Index("ix_events_token", "token_id", "id"),
)

# MEMORY.md is token-wide (user_id ""); USER.md exists token-wide and per end user.
curated = Table(
    "curated",
    metadata,
    Column("token_id", Integer, primary_key=True),
    Column("kind", String(10), primary_key=True),
    Column("user_id", String(200), primary_key=True),
    Column("body", Text, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
)

# The memory event log: append-only, the source of truth for memory state. `messages` and
# `curated` are its projections (docs/events.md). Two writers can never both append version n
# of one aggregate: the pair is unique.
memory_events = Table(
    "memory_events",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("event_id", String(36), nullable=False, unique=True),
    Column("token_id", Integer, nullable=False),
    Column("type", String(40), nullable=False),
    Column("aggregate_id", String(700), nullable=False),
    Column("version", Integer, nullable=False),
    Column("payload", Text, nullable=False),
    Column("embed_model", String(200), nullable=True),
    Column("meta", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    UniqueConstraint("aggregate_id", "version", name="uq_memory_events_aggregate_version"),
    Index("ix_memory_events_token", "token_id", "id"),
    sqlite_autoincrement=True,
)

# After-turn work: one job per (event, consumer), inserted in the event's transaction.
# Times are epoch seconds (float) so both databases compare them the same way.
jobs = Table(
    "jobs",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("event_id", String(36), nullable=False),
    Column("consumer", String(20), nullable=False),
    Column("token_id", Integer, nullable=False),
    Column("order_key", String(700), nullable=False),
    Column("status", String(12), nullable=False),
    Column("step", String(20), nullable=True),
    Column("attempts", Integer, nullable=False, server_default="0"),
    Column("lease_owner", String(80), nullable=True),
    Column("lease_expires_at", Float, nullable=True),
    Column("next_attempt_at", Float, nullable=False),
    Column("last_error", String(300), nullable=True),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    UniqueConstraint("event_id", "consumer", name="uq_jobs_event_consumer"),
    Index("ix_jobs_claim", "status", "next_attempt_at"),
    # With the status: a claim asks, per candidate, whether an earlier job of its order key is
    # still open, and one session's order key gathers every finished job of the session.
    Index("ix_jobs_order_status", "order_key", "consumer", "status", "id"),
    Index("ix_jobs_token", "token_id", "status"),
)

# The context trace of each chat request with memory (what was injected and why), kept for a
# bounded count and age per token (TRACE_RETENTION_*).
context_traces = Table(
    "context_traces",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("token_id", Integer, nullable=False),
    Column("request_id", String(16), nullable=False),
    Column("created_at", Float, nullable=False),
    Column("body", Text, nullable=False),
    Index("ix_context_traces_request", "token_id", "request_id"),
    Index("ix_context_traces_age", "token_id", "created_at"),
)

# Which vector shard each token's layer recalls from (its generation), and the rebuild or
# re-embed filling the next one (lifecycle.generations). No row: generation 0 of the token's
# current embedder. `embedder` is the sealed spec of the active shard's embedder while it
# differs from the token's config (a re-embed under way), so queries still match its vectors.
vector_generations = Table(
    "vector_generations",
    metadata,
    Column("token_id", Integer, primary_key=True),
    Column("layer", String(20), primary_key=True),
    Column("active_model", String(300), nullable=False),
    Column("active_dims", Integer, nullable=False),
    Column("embedder", Text, nullable=True),
    Column("generation", Integer, nullable=False),
    Column("state", String(12), nullable=False),
    Column("target_model", String(300), nullable=True),
    Column("target_dims", Integer, nullable=True),
    Column("reason", String(20), nullable=True),
    Column("event_id", String(36), nullable=True),
    Column("checkpoint", BigId, nullable=False, server_default="0"),
    Column("done", Integer, nullable=False, server_default="0"),
    Column("total", Integer, nullable=False, server_default="0"),
    Column("error", String(300), nullable=True),
    Column("updated_at", Float, nullable=False),
)

# The stored Responses each token created (ids taken from the replies the proxy relayed): every
# path that names a response id is answered only for its creator (storage.response_owners).
# `instructions`: how the proxy changed the request's `instructions` (NULL: it did not; -1: the
# client sent none; n: the client's were its first n characters), so the echo of a retrieved
# response can be given back as the client sent it.
response_owners = Table(
    "response_owners",
    metadata,
    Column("token_id", Integer, primary_key=True),
    Column("response_id", String(200), primary_key=True),
    Column("created_at", Float, nullable=False),
    Column("instructions", Integer, nullable=True),
)

# When each recalled memory of an end user was last injected, and how often (fading,
# `storage.access`): written in batches off the request path, only for tokens with
# `memory.forge.fadeHalfLifeDays`. Ids only, never text; erased with the end user.
memory_access = Table(
    "memory_access",
    metadata,
    Column("token_id", Integer, primary_key=True),
    Column("user_id", String(200), primary_key=True),
    Column("source", String(20), primary_key=True),
    Column("item_id", String(100), primary_key=True),
    Column("last_used_at", Float, nullable=False),
    Column("importance", Float, nullable=True),
    Column("uses", Integer, nullable=False, server_default="0"),
)
