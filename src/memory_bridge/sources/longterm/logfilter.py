"""Mem0's log records scrubbed of the secrets of the token being served.

Mem0 logs exception texts that can quote credentials (a provider's error echoing a key). Every
call into Mem0 runs with the served token's secrets in `serving` (a context variable, copied
into the pool's thread), and the filter replaces them in each `mem0.*` record; repeated
"X not installed" notices are dropped after the first.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from contextvars import ContextVar

__all__ = ["install", "serving"]

_secrets: ContextVar[tuple[str, ...]] = ContextVar("mem0_log_secrets", default=())


@contextlib.contextmanager
def serving(secrets: tuple[str, ...]) -> Iterator[None]:
    """Scrub `secrets` from Mem0's records logged in this context (and threads run from it)."""
    token = _secrets.set(secrets)
    try:
        yield
    finally:
        _secrets.reset(token)


class _Mem0LogFilter(logging.Filter):
    def __init__(self) -> None:
        super().__init__()
        self._seen: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "not installed" in message:
            if message in self._seen:
                return False
            self._seen.add(message)
        for secret in _secrets.get():
            if secret:
                message = message.replace(secret, "***")
        record.msg, record.args = message, None
        if record.exc_info:  # a traceback would print the exception's text unscrubbed
            record.exc_info, record.exc_text = None, None
        return True


_filter = _Mem0LogFilter()


def install() -> None:
    """Logger filters do not apply to child loggers: put it on every `mem0.*` logger (again
    after Mem0 imported more modules, each creating its logger)."""
    for name, logger in list(logging.root.manager.loggerDict.items()):
        ours = name == "mem0" or name.startswith("mem0.")
        if ours and isinstance(logger, logging.Logger) and _filter not in logger.filters:
            logger.addFilter(_filter)
