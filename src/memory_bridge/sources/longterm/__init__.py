"""Long-term memory: Mem0's facts, with their vectors in MemoryBridge's own vector engine.

One job per module:

- `source`: the memory source (recall, the after-turn add, the admin operations);
- `pool`: the Mem0 instances, one per token, built, rebuilt and closed as tokens change;
- `instance`: building one Mem0 `Memory` bound to our vector store and embedder;
- `mem0_store`: Mem0's `VectorStoreBase` over a `vectors.VectorIndex` shard;
- `points`: what a Mem0 memory looks like as a point of the engine, and back;
- `embedder`: the embedder a Mem0 instance is given (the process-wide local model, or the
  provider's client with bounded timeouts);
- `events`: the `longterm.*` events a fact change appends to the event log;
- `logfilter`: Mem0's log records scrubbed of the served token's secrets;
- `config`: from a token's configuration to what an instance needs (pure);
- `check`: the save-time checks of a token's long-term memory settings.

Nothing here imports Mem0 at import time: it is imported on first use, in the memory thread
pool, after `MEM0_TELEMETRY`/`MEM0_DIR` are set.
"""
