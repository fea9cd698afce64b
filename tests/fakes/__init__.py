"""In-process fakes of external services (OpenAI-compatible upstream, ...) for tests."""
