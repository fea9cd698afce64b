"""Table definitions. Every memory-bearing row is keyed by the stable token id."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
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
