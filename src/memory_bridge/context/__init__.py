"""Recall fan-out and assembly of the messages sent upstream."""
