"""Every timestamp the admin API shows carries its time zone (SQLite stores none: they are
UTC, and say so), so a client never reads UTC as its local time."""

from __future__ import annotations

from datetime import datetime, timedelta

from tests.fakes.upstream import FakeUpstream
from tests.support.proxy import Proxy


def _aware(value: str) -> datetime:
    parsed = datetime.fromisoformat(value)
    assert parsed.utcoffset() == timedelta(0), value
    return parsed


def test_admin_timestamps_are_utc_with_their_zone(proxy: Proxy, upstream: FakeUpstream) -> None:
    token_id, token = proxy.create_token()
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "user": "ana"}
    assert proxy.chat(token, headers={"X-Session-Id": "s1"}, **body).status_code == 200
    detail = proxy.admin("GET", f"/tokens/{token_id}").json()
    stamps = [detail["created_at"], detail["updated_at"]]
    sessions = proxy.admin("GET", f"/tokens/{token_id}/sessions", params={"user": "ana"}).json()
    stamps += [sessions["data"][0]["first_activity"], sessions["data"][0]["last_activity"]]
    users = proxy.admin("GET", f"/tokens/{token_id}/users").json()
    stamps.append(users["data"][0]["last_activity"])
    history = proxy.admin(
        "GET", f"/tokens/{token_id}/sessions/messages", params={"user": "ana", "session": "s1"}
    ).json()
    stamps += [row["created_at"] for row in history["data"]]
    assert len(stamps) == 7
    for stamp in stamps:
        _aware(stamp)
