"""Infrastructure settings, read from `.env` and the environment.

Only infrastructure lives here (ports, paths, timeouts). Upstream and embedder API keys
belong to tokens and are stored in the database, never in `.env`.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

# Headers that carry request tracing or OpenAI account routing; forwarded upstream as is.
DEFAULT_FORWARDED_HEADERS = (
    "traceparent",
    "tracestate",
    "openai-organization",
    "openai-project",
)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_file=".env", env_file_encoding="utf-8", extra="ignore", frozen=True
    )

    log_level: str = "INFO"
    # `json`: one JSON object per log line (request id, token id, route, status, timings).
    log_format: Literal["text", "json"] = "text"
    # A bearer token for `GET /metrics` alone (a scraper need not hold the admin token).
    metrics_token: str = Field(default="", repr=False)
    # The console's sign-in lasts this long (its session is also ended by signing out).
    console_session_seconds: int = Field(default=8 * 3600, gt=0, le=7 * 86400)
    memory_bridge_host: str = "127.0.0.1"
    memory_bridge_port: int = Field(default=8000, ge=0, le=65535)
    memory_bridge_data_dir: Path = Path("data")
    database_url: str = ""

    http_timeout: float = Field(default=120.0, gt=0)
    http_connect_timeout: float = Field(default=10.0, gt=0)
    http_max_connections: int = Field(default=512, gt=0)
    http_max_keepalive: int = Field(default=128, gt=0)
    # Idle upstream connections are closed after this, before common servers' 5 s.
    http_keepalive_timeout: float = Field(default=4.0, gt=0)
    forward_headers: str = ""

    memory_template_path: Path = Path("templates/memory_template.md")
    memory_template_zh_path: Path = Path("templates/memory_template_zh.md")

    memory_search_timeout: float = Field(default=30.0, gt=0)
    memory_store_timeout: float = Field(default=120.0, gt=0)
    memory_threads: int = Field(default=4, gt=0, le=64)

    # Vectors (episodic and Mem0's) live in the embedded engine under the data dir unless a
    # Qdrant server is named. QDRANT_PATH (qdrant-client's local mode) is deprecated: ignored,
    # with a warning at startup.
    qdrant_path: Path | None = None
    qdrant_url: str = ""
    qdrant_api_key: str = ""
    # A Qdrant binary `serve` starts as its child (the embedded server option).
    qdrant_binary: str = ""
    qdrant_port: int = Field(default=6333, ge=1, le=65535)
    qdrant_storage_path: Path | None = None
    qdrant_log_path: Path | None = None
    qdrant_startup_timeout: float = Field(default=30.0, gt=0)
    qdrant_stop_grace: float = Field(default=10.0, gt=0)

    curated_max_bytes: int = Field(default=65536, gt=0)

    token_cache_ttl: float = Field(default=5.0, ge=0)

    # Context traces (what each chat request was given, and why), kept per token.
    trace_retention_count: int = Field(default=1000, gt=0)
    trace_retention_seconds: float = Field(default=7 * 86400.0, gt=0)
    # Episodic memory (the raw conversation indexed for hybrid recall) for every token;
    # off: long-term recall is Mem0's facts alone.
    episodic_memory: bool = True
    # A session with no new turn for this long is summarised (tokens with
    # `memory.longterm.summaries`): the delay of each turn's summary job.
    summary_idle_seconds: float = Field(default=900.0, ge=0.0, le=30 * 86400.0)
    # Vector shards opened at start-up, before `/ready` answers 200 (the newest tokens' first).
    ready_warm_shards: int = Field(default=64, ge=0, le=10_000)
    # The episodic embedder of a token without one: `local` (the packaged MiniLM where the
    # `local` extra is installed, else BM25 alone) or `none` (BM25 alone).
    episodic_default_embedder: Literal["local", "none"] = "local"
    # Where the local embedder's forward pass runs: ONNX Runtime (the same vectors, checked at
    # load, faster; torch where the export or the check fails) or torch.
    local_embedder_runtime: Literal["onnx", "torch"] = "onnx"
    # Recalled memory placed in a prompt is fitted to this many tokens (the Context Forge).
    memory_token_budget: int = Field(default=1500, gt=0)
    # A vector shard is optimised (HNSW build, segment merge; in the background, started by the
    # job worker, one shard at a time) once it has grown by this many points, or by half its
    # size at the last optimisation if that is more; 0: never.
    vector_optimize_threshold: int = Field(default=2_000, ge=0)
    # The embedded engine creates and writes no shard with less free disk than this (MiB): a
    # memory-mapped write on a full disk kills the process (SIGBUS) rather than failing.
    vector_min_free_mb: int = Field(default=64, ge=0)
    # The embedded engine keeps at most this many shards open (each holds engine threads,
    # files and mapped pages); the least recently used idle one is closed for another to open,
    # and reopens on its next use. 0: no bound (one open shard per token and model, forever).
    vector_max_open_shards: int = Field(default=32, ge=0, le=100_000)
    # The long-term layer keeps at most this many tokens' Mem0 instances (each holds its
    # in-memory history and its LLM and embedder clients); the least recently used one is
    # closed for another to be built, and built again on its token's next use. 0: no bound.
    mem0_max_instances: int = Field(default=64, ge=0, le=100_000)

    # The durable job queue (docs/operations.md). `serve` drains it too unless told not to.
    serve_worker: bool = True
    job_concurrency: int = Field(default=8, gt=0, le=256)
    # Renewed by the worker's heartbeat (every third) while a job runs, however long it runs.
    job_lease_seconds: float = Field(default=30.0, gt=0, le=3600)
    job_poll_seconds: float = Field(default=1.0, gt=0)
    job_max_attempts: int = Field(default=5, gt=0)
    job_backoff_seconds: float = Field(default=2.0, gt=0)
    job_retention_seconds: float = Field(default=7 * 86400.0, gt=0)
    # The backlog's bounds (docs/operations.md#backpressure): past either, a turn's episodic
    # job is coalesced (run later, in batches) rather than pending; past the token's own, its
    # other jobs are deferred (run later, one by one, in order); nothing is refused.
    job_max_pending_per_token: int = Field(default=200, gt=0, le=1_000_000)
    job_max_pending: int = Field(default=2_000, gt=0, le=10_000_000)
    # Jobs of one token an episodic batch indexes at once (one embedding call, one upsert).
    job_batch_size: int = Field(default=32, ge=1, le=1_000)
    # Runs of the episodic index (a lone job or a batch) one worker has at once: its share of the
    # pool recall shares (MEMORY_THREADS).
    job_batch_runs: int = Field(default=1, ge=1, le=64)

    # Bounds on what a client (or an upstream) can make the proxy hold (docs/configuration.md).
    max_request_bytes: int = Field(default=32 * 1024 * 1024, gt=0)
    max_stored_message_bytes: int = Field(default=64 * 1024, gt=0)
    # Messages (chat `messages`, Responses `input` items) one request may carry: more is a 400.
    max_request_messages: int = Field(default=10_000, gt=0, le=1_000_000)
    # Messages one turn stores; the older ones of a longer turn are stored as one marker.
    max_stored_messages_per_turn: int = Field(default=500, ge=2, le=100_000)
    # A request body larger than this is parsed (and re-serialised) in a thread, not on the
    # event loop every other request shares; 0: always.
    parse_in_thread_bytes: int = Field(default=256 * 1024, ge=0)
    # Injected session history is cut to this many tokens (newest first) as well as by count.
    history_token_budget: int = Field(default=8000, gt=0)
    max_upstream_body_bytes: int = Field(default=64 * 1024 * 1024, gt=0)
    # A request whose head or body takes longer than these is answered 408 and dropped.
    header_read_timeout: float = Field(default=10.0, gt=0)
    # Idle client connections are kept this long: longer than clients' own pools keep them
    # (httpx, the openai SDK: 5 s), so the client closes first and never sends a request on a
    # connection the server is closing.
    keep_alive_timeout: int = Field(default=30, gt=0)
    body_read_timeout: float = Field(default=30.0, gt=0)
    # Below this rate (bytes/s, after the first second) a body is too slow to keep reading.
    min_body_rate: int = Field(default=1024, ge=0)
    # Requests whose body is being read at once; more wait their turn, then get 503.
    max_reading_requests: int = Field(default=256, gt=0)
    # An import's body (NDJSON, staged on disk as it arrives): its own size and time limits.
    max_import_bytes: int = Field(default=256 * 1024 * 1024, gt=0)
    import_read_timeout: float = Field(default=600.0, gt=0)
    # Provider keys in token configs are encrypted with this key (or the key file's).
    memory_bridge_secret_key: str = ""
    memory_bridge_secret_key_file: Path | None = None
    background_drain_timeout: float = Field(default=30.0, gt=0)

    @cached_property
    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite+aiosqlite:///{self.memory_bridge_data_dir / 'memory_bridge.db'}"

    @cached_property
    def resolved_qdrant_url(self) -> str:
        """The Qdrant server to use, or "" for the embedded engine."""
        if self.qdrant_binary:
            return f"http://127.0.0.1:{self.qdrant_port}"
        return self.qdrant_url

    @cached_property
    def resolved_secret_key_path(self) -> Path:
        return self.memory_bridge_secret_key_file or self.memory_bridge_data_dir / "secret.key"

    @cached_property
    def mem0_dir(self) -> Path:
        return self.memory_bridge_data_dir / "mem0"

    @cached_property
    def forwarded_header_names(self) -> frozenset[str]:
        extra = (h.strip().lower() for h in self.forward_headers.split(","))
        return frozenset(DEFAULT_FORWARDED_HEADERS) | {h for h in extra if h}

    def template_path(self, language: str) -> Path:
        """The template of a language the token config allows (`TEMPLATE_LANGUAGES`)."""
        return {"en": self.memory_template_path, "zh": self.memory_template_zh_path}[language]
