"""The sign-in and sign-out pages."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from starlette.responses import HTMLResponse, Response

from memory_bridge.http.console import session as auth
from memory_bridge.http.console.views import ENV, redirect
from memory_bridge.storage.console_sessions import ConsoleSession

router = APIRouter()
Signed = Annotated[ConsoleSession, Depends(auth.current)]


def _form(request: Request, status: int, error: str = "") -> Response:
    response = HTMLResponse("", status_code=status)
    token = auth.set_login_cookie(request, response)
    html = ENV.get_template("login.html").render(
        csrf="", signed_in=False, path=request.url.path, login_csrf=token, error=error
    )
    response.body = response.render(html)
    response.headers["content-length"] = str(len(response.body))
    return response


@router.get("/login")
async def login_form(request: Request) -> Response:
    return _form(request, 200)


@router.post("/login")
async def login(request: Request) -> Response:
    signed = await auth.sign_in(request)
    if signed is None:
        return _form(request, 401, "That is not the admin token.")
    done = redirect("/console/")
    auth.set_session_cookie(request, done, signed)
    return done


@router.post("/logout")
async def logout(request: Request, session: Signed) -> Response:
    await auth.checked_form(request, session.csrf)
    done = redirect("/console/login")
    auth.sign_out(request, session, done)
    return done
