"""Shared test support code (loopback servers and similar harnesses)."""
