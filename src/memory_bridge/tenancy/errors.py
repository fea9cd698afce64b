"""The one error a token configuration raises."""

from __future__ import annotations


class TokenConfigError(ValueError):
    """A token configuration is invalid; `field` names the first offending field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
