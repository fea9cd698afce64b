"""The memory event log, its projections, and the durable job queue of after-turn work."""
