"""The console's session cookie: Secure over https only, always HttpOnly and SameSite=Strict;
a tampered or ended session is refused."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from starlette.testclient import TestClient

from memory_bridge.http.console import session as auth
from memory_bridge.storage.console_sessions import ConsoleSessions


def _app(sessions: ConsoleSessions) -> Starlette:
    async def start(request: Request) -> Response:
        response = PlainTextResponse("in")
        auth.set_session_cookie(request, response, sessions.start())
        return response

    async def whoami(request: Request) -> Response:
        try:
            return PlainTextResponse(auth.current(request).id)
        except auth.SignInNeeded:
            return PlainTextResponse("out", status_code=401)

    app = Starlette(routes=[Route("/console/start", start), Route("/console/me", whoami)])
    app.state.services = SimpleNamespace(console_sessions=sessions)
    return app


@pytest.mark.parametrize(
    ("base", "secure"), [("https://testserver", True), ("http://testserver", False)]
)
def test_the_cookie_is_secure_over_https_only(base: str, secure: bool) -> None:
    client = TestClient(_app(ConsoleSessions(3600)), base_url=base)
    headers = client.get("/console/start").headers.get_list("set-cookie")
    header = next(h for h in headers if h.startswith(f"{auth.COOKIE}="))
    flags = [part.strip().lower() for part in header.split(";")]
    assert "httponly" in flags
    assert "samesite=strict" in flags
    assert "path=/console" in flags
    assert ("secure" in flags) is secure


def test_a_tampered_or_ended_session_is_refused() -> None:
    sessions = ConsoleSessions(3600)
    client = TestClient(_app(sessions), base_url="https://testserver")
    client.get("/console/start")
    signed = client.cookies[auth.COOKIE]
    session_id = client.get("/console/me").text
    assert session_id in signed
    client.cookies[auth.COOKIE] = signed[:-2] + ("AA" if not signed.endswith("AA") else "BB")
    assert client.get("/console/me").status_code == 401
    client.cookies[auth.COOKIE] = signed
    assert client.get("/console/me").status_code == 200
    sessions.end(session_id)
    assert client.get("/console/me").status_code == 401
