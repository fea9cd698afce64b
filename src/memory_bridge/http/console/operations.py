"""Users (erase one end user, with a confirmation and the erasure's receipt), Jobs (the queue
per consumer, failed and unknown jobs with their scrubbed errors, retry) and Audit."""

from __future__ import annotations

import logging
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request
from sqlalchemy import Connection
from starlette.responses import Response

from memory_bridge.core.errors import ProxyError
from memory_bridge.core.request_context import request_id_var
from memory_bridge.events import queue, queue_reads
from memory_bridge.http.console import session as auth
from memory_bridge.http.console.views import PAGE, page, redirect, token_choices
from memory_bridge.http.services import services_of
from memory_bridge.lifecycle.erase import erase_user
from memory_bridge.storage.console_sessions import ConsoleSession

log = logging.getLogger(__name__)
router = APIRouter()
Signed = Annotated[ConsoleSession, Depends(auth.current)]
TokenQ = Annotated[int | None, Query(ge=1, le=2**31 - 1)]
TokenP = Annotated[int, Path(ge=1, le=2**31 - 1)]
Label = Annotated[str, Query(max_length=200)]


@router.get("/users")
async def users(
    request: Request, session: Signed, token: TokenQ = None, user: Label = ""
) -> Response:
    tokens = await token_choices(request)
    return page(
        request, "users.html", session, tokens=tokens, token=token, user=user, confirm=False
    )


@router.post("/users/confirm")
async def confirm_erase(request: Request, session: Signed) -> Response:
    form = await auth.checked_form(request, session.csrf)
    tokens = await token_choices(request)
    token_raw, user = auth.text(form, "token"), auth.text(form, "user")[:200]
    token = int(token_raw) if token_raw.isdigit() and len(token_raw) < 10 else 0
    if not user or not user.isprintable():
        return page(
            request,
            "users.html",
            session,
            422,
            tokens=tokens,
            token=token,
            user=user,
            confirm=False,
            error="Name the end user to erase.",
        )
    return page(request, "users.html", session, tokens=tokens, token=token, user=user, confirm=True)


@router.post("/users/erase")
async def erase(request: Request, session: Signed) -> Response:
    form = await auth.checked_form(request, session.csrf)
    token_raw, user = auth.text(form, "token"), auth.text(form, "user")[:200]
    token = int(token_raw) if token_raw.isdigit() and len(token_raw) < 10 else 0
    services = services_of(request)
    record = await services.memory.tokens.get(token)
    if record is None or record.is_admin or not user or not user.isprintable():
        return page(request, "error.html", session, 404, error="No such token or end user.")
    try:
        erased = await erase_user(
            services.memory, token, user, traces=services.traces, request_id=request_id_var.get()
        )
    except ProxyError as exc:
        return page(request, "error.html", session, exc.status, error=exc.message)
    except Exception as exc:
        log.warning("console: erasure did not finish (%s)", type(exc).__name__)
        return page(
            request,
            "error.html",
            session,
            502,
            error=f"The erasure did not finish ({type(exc).__name__}); erase again to finish it.",
        )
    return page(request, "erased.html", session, token=token, user=user, receipt=erased.as_json())


@router.get("/jobs")
async def jobs(
    request: Request, session: Signed, token: TokenQ = None, message: str = ""
) -> Response:
    tokens = await token_choices(request)
    token = token or (tokens[0]["id"] if tokens else None)
    summary: dict[str, Any] = {}
    attention: list[dict[str, Any]] = []
    if token is not None:
        picked = token

        def read(conn: Connection) -> tuple[dict[str, Any], list[dict[str, Any]]]:
            return queue_reads.summary(conn, picked), queue_reads.listed(
                conn, picked, ("failed", "unknown"), PAGE
            )

        summary, attention = await services_of(request).memory.db.run(read)
    return page(
        request,
        "jobs.html",
        session,
        tokens=tokens,
        token=token,
        summary=summary,
        attention=attention,
        message="The job is queued again." if message == "retried" else "",
    )


@router.post("/jobs/{token}/{job_id}/retry")
async def retry(
    request: Request, session: Signed, token: TokenP, job_id: Annotated[int, Path(ge=1, le=2**62)]
) -> Response:
    await auth.checked_form(request, session.csrf)
    services = services_of(request)
    done = await services.memory.db.write(lambda conn: queue.requeue(conn, token, job_id))
    if not done:
        return page(
            request, "error.html", session, 409, error=f"No failed or unknown job {job_id}."
        )
    if services.worker is not None:
        services.worker.wake()
    return redirect(f"/console/jobs?token={token}&message=retried")


@router.get("/audit")
async def audit(
    request: Request,
    session: Signed,
    token: TokenQ = None,
    type: Label = "",
    user: Label = "",
    after: Annotated[int, Query(ge=0, le=2**62)] = 0,
) -> Response:
    tokens = await token_choices(request)
    token = token or (tokens[0]["id"] if tokens else None)
    found: list[Any] = []
    if token is not None:
        found = await services_of(request).memory.audit.list(
            token, type_=type or None, after_id=after, limit=PAGE + 1
        )
    rows = [e for e in found[:PAGE] if not user or e.user == user]
    return page(
        request,
        "audit.html",
        session,
        tokens=tokens,
        token=token,
        type=type,
        user=user,
        events=rows,
        next_after=found[PAGE - 1].id if len(found) > PAGE else None,
    )
