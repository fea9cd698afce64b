"""MemoryBridge: an OpenAI-compatible, transparent memory proxy."""

__version__ = "0.1.0"
