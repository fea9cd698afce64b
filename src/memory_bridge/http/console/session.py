"""Signing in to the console: the admin token once, in a form; a signed session cookie after.

The cookie holds only a signed, random session id (itsdangerous, expiring with the session);
the session itself is server-side (`storage.console_sessions`), so signing out ends it even
for a copy of the cookie. The admin token is compared and forgotten: never stored, echoed,
put in a URL or logged. A service token never signs in. Every state-changing form carries the
session's CSRF token; the sign-in form, before any session, a double-submit cookie's.
"""

from __future__ import annotations

import hmac
import logging
import secrets

from itsdangerous import BadSignature, TimestampSigner
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response

from memory_bridge.http.services import services_of
from memory_bridge.storage.console_sessions import ConsoleSession, ConsoleSessions

log = logging.getLogger(__name__)

COOKIE = "mb_console"
LOGIN_COOKIE = "mb_console_login"
PATH = "/console"
_SALT = "memorybridge.console.session"
# A form is small: no upload is accepted anywhere in the console's forms.
MAX_FIELDS = 50
MAX_FIELD_BYTES = 1 << 20


class SignInNeeded(Exception):
    """No live session: the page redirects to the sign-in form."""


class CsrfRefused(Exception):
    """A state-changing form without this session's CSRF token: 403, nothing changed."""


def _signer(sessions: ConsoleSessions) -> TimestampSigner:
    return TimestampSigner(sessions.key, salt=_SALT)


def current(request: Request) -> ConsoleSession:
    """The request's live session (a FastAPI dependency of every page but the sign-in)."""
    sessions = services_of(request).console_sessions
    raw = request.cookies.get(COOKIE)
    if not raw:
        raise SignInNeeded
    try:
        session_id = _signer(sessions).unsign(raw, max_age=int(sessions.lifetime)).decode()
    except BadSignature:
        raise SignInNeeded from None
    session = sessions.get(session_id)
    if session is None:
        raise SignInNeeded
    return session


async def checked_form(request: Request, csrf: str, files: int = 0) -> FormData:
    """The posted form, once its CSRF field matched `csrf` (with at most `files` uploads)."""
    form = await request.form(max_files=files, max_fields=MAX_FIELDS, max_part_size=MAX_FIELD_BYTES)
    sent = form.get("csrf")
    if not isinstance(sent, str) or not hmac.compare_digest(sent.encode(), csrf.encode()):
        raise CsrfRefused
    return form


def text(form: FormData, name: str, default: str = "") -> str:
    value = form.get(name, default)
    return value if isinstance(value, str) else default


def _secure(request: Request) -> bool:
    return request.url.scheme == "https"


def set_login_cookie(request: Request, response: Response) -> str:
    """A fresh double-submit token for the sign-in form, set as a cookie; the form's field
    must carry the same."""
    token = secrets.token_urlsafe(32)
    response.set_cookie(
        LOGIN_COOKIE,
        token,
        max_age=3600,
        path=PATH,
        secure=_secure(request),
        httponly=True,
        samesite="strict",
    )
    return token


async def sign_in(request: Request) -> ConsoleSession | None:
    """A new session if the form carried the admin token (and its CSRF token); else None."""
    form = await request.form(max_files=0, max_fields=MAX_FIELDS, max_part_size=MAX_FIELD_BYTES)
    expected = request.cookies.get(LOGIN_COOKIE, "")
    sent = text(form, "csrf")
    if not expected or not hmac.compare_digest(sent.encode(), expected.encode()):
        raise CsrfRefused
    secret = text(form, "token").strip()
    if not secret:
        return None
    services = services_of(request)
    try:
        principal = await services.memory.tokens.authenticate(secret)
    except Exception as exc:
        log.error("console sign-in: token store failed (%s)", type(exc).__name__)
        return None
    if principal is None or not principal.is_admin:
        log.warning("console sign-in refused (not the admin token)")
        return None
    log.info("console signed in")
    return services.console_sessions.start()


def set_session_cookie(request: Request, response: Response, session: ConsoleSession) -> None:
    sessions = services_of(request).console_sessions
    response.set_cookie(
        COOKIE,
        _signer(sessions).sign(session.id).decode(),
        max_age=int(sessions.lifetime),
        path=PATH,
        secure=_secure(request),
        httponly=True,
        samesite="strict",
    )
    response.delete_cookie(
        LOGIN_COOKIE, path=PATH, secure=_secure(request), httponly=True, samesite="strict"
    )


def sign_out(request: Request, session: ConsoleSession, response: Response) -> None:
    services_of(request).console_sessions.end(session.id)
    response.delete_cookie(
        COOKIE, path=PATH, secure=_secure(request), httponly=True, samesite="strict"
    )
    log.info("console signed out")
