"""Service tokens: their configuration, secrets and masking (no I/O here)."""
