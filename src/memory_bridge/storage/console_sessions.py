"""The console's sign-ins, held server-side: a session cookie names one, signing out ends it.

In this process's memory: a restart signs everyone out, and each serving process has its own
(sign in again on another). Bounded: the oldest sign-in goes when the table is full.
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass

_MAX_SESSIONS = 1000


@dataclass(frozen=True, slots=True)
class ConsoleSession:
    id: str
    csrf: str  # the token every state-changing form of this sign-in carries
    expires_at: float


class ConsoleSessions:
    def __init__(self, lifetime: float) -> None:
        self.lifetime = lifetime
        # Signs the cookies naming these sessions; per process, like the sessions themselves.
        self.key = secrets.token_bytes(32)
        self._live: OrderedDict[str, ConsoleSession] = OrderedDict()

    def start(self) -> ConsoleSession:
        self._prune()
        while len(self._live) >= _MAX_SESSIONS:
            self._live.popitem(last=False)
        session = ConsoleSession(
            id=secrets.token_urlsafe(32),
            csrf=secrets.token_urlsafe(32),
            expires_at=time.time() + self.lifetime,
        )
        self._live[session.id] = session
        return session

    def get(self, session_id: str) -> ConsoleSession | None:
        session = self._live.get(session_id)
        if session is None:
            return None
        if session.expires_at <= time.time():
            del self._live[session_id]
            return None
        return session

    def end(self, session_id: str) -> None:
        self._live.pop(session_id, None)

    def _prune(self) -> None:
        now = time.time()
        for gone in [k for k, s in self._live.items() if s.expires_at <= now]:
            del self._live[gone]
