"""Memory layers. Each is one module implementing `MemorySource` (see `base`)."""
