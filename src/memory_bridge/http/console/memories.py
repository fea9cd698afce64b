"""Memories of an end user (long-term facts: list, search, edit, delete; with their lineage),
the curated MEMORY.md / USER.md editor, and the recall playground."""

from __future__ import annotations

import logging
import time
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, Path, Query, Request
from starlette.responses import Response

from memory_bridge.context.forge import fade
from memory_bridge.context.forge.intent import Intent
from memory_bridge.core.errors import ProxyError
from memory_bridge.core.messages import Message
from memory_bridge.core.timestamps import epoch_of
from memory_bridge.core.turn import Scope, Turn
from memory_bridge.http.console import session as auth
from memory_bridge.http.console.views import PAGE, offset_of, page, redirect, token_choices
from memory_bridge.http.services import Services, services_of
from memory_bridge.lifecycle.forget import delete_facts
from memory_bridge.sources.longterm import config as mem0_config
from memory_bridge.sources.longterm.points import EVENT_ID_KEY
from memory_bridge.storage.console_sessions import ConsoleSession
from memory_bridge.tenancy.config import TokenConfig

log = logging.getLogger(__name__)
router = APIRouter()
Signed = Annotated[ConsoleSession, Depends(auth.current)]
TokenQ = Annotated[int | None, Query(ge=1, le=2**31 - 1)]
TokenP = Annotated[int, Path(ge=1, le=2**31 - 1)]
Label = Annotated[str, Query(max_length=200)]
MemoryId = Annotated[str, Path(pattern=r"^[0-9a-f-]{36}$")]
# The playground's session: one no request uses, so no stored history is recalled as if the
# question were part of a conversation.
PLAYGROUND_SESSION = "console-playground"


async def config_of(request: Request, token: int) -> TokenConfig:
    record = await services_of(request).memory.tokens.get(token)
    if record is None or record.is_admin:
        raise ProxyError(404, "not_found_error", f"No token with id {token}.")
    if record.config is None:
        raise ProxyError(409, "conflict_error", f"Token {token} has no usable config.")
    return record.config


def _fact(token: int, memory: Any) -> dict[str, Any]:
    return {
        "id": memory.id,
        "text": memory.text,
        "user": mem0_config.end_user(token, memory.namespace),
        "updated_at": memory.updated_at or memory.created_at,
        "score": memory.score,
        "event_id": memory.metadata.get(EVENT_ID_KEY),
    }


@router.get("/memories")
async def memories(
    request: Request,
    session: Signed,
    token: TokenQ = None,
    user: Label = "",
    q: Annotated[str, Query(max_length=4000)] = "",
    message: Annotated[str, Query(max_length=100)] = "",
) -> Response:
    tokens = await token_choices(request)
    token = token or (tokens[0]["id"] if tokens else None)
    offset = offset_of(request)
    facts: list[dict[str, Any]] = []
    total = 0
    fading = False
    error = ""
    if token is not None:
        longterm = services_of(request).memory.longterm
        try:
            config = await config_of(request, token)
            if not mem0_config.enabled(config):
                error = "Long-term memory is off for this token."
            elif q.strip():
                found = await longterm.search(token, config, q, user, PAGE)
                facts, total = [_fact(token, m) for m in found], len(found)
            else:
                # One page read, not the whole list: a user may hold 100,000 facts.
                found, total = await longterm.page_memories(token, config, user, offset, PAGE)
                facts = [_fact(token, m) for m in found]
            fading = await _fading(services_of(request), token, config, facts)
        except ProxyError as exc:
            error = exc.message
        except Exception as exc:
            log.warning("console: long-term memory failed (%s)", type(exc).__name__)
            error = f"Long-term memory failed ({type(exc).__name__})."
    return page(
        request,
        "memories.html",
        session,
        tokens=tokens,
        token=token,
        user=user,
        q=q,
        facts=facts,
        fading=fading,
        total=total,
        offset=offset,
        has_more=offset + PAGE < total and not q.strip(),
        size=PAGE,
        error=error,
        message={"edited": "The fact was saved.", "deleted": "The fact was deleted."}.get(
            message, ""
        ),
    )


async def _fading(
    services: Services, token: int, config: TokenConfig, facts: list[dict[str, Any]]
) -> bool:
    """Each fact's fading (`fading` key) when the token has it on; whether it has."""
    rules = services.chat.rules_for(config.memory_config.forge, Intent.FACTUAL)
    access = services.memory.access
    if not fade.enabled(rules) or access is None:
        return False
    now = time.time()
    for user in {str(f["user"] or "") for f in facts}:
        mine = [f for f in facts if str(f["user"] or "") == user]
        used = await access.last_used(token, user, [("longterm", f["id"]) for f in mine])
        for f in mine:
            made = epoch_of(f["updated_at"])
            f["fading"] = fade.reading("longterm", f["id"], made, None, used, now, rules)
    return True


@router.post("/memories/{token}/{memory_id}")
async def change_fact(
    request: Request, session: Signed, token: TokenP, memory_id: MemoryId
) -> Response:
    form = await auth.checked_form(request, session.csrf)
    action = auth.text(form, "action")
    user = auth.text(form, "user")
    services = services_of(request)
    longterm = services.memory.longterm
    try:
        config = await config_of(request, token)
        if action == "delete":
            # As the admin API deletes a fact: from every layer and trace that holds it.
            deleted = await longterm.delete(token, config, memory_id)
            if deleted is not None:
                traces = services.traces
                await delete_facts(services.memory, token, config, [deleted], traces=traces)
            done = deleted is not None
        else:
            new_text = auth.text(form, "text").strip()
            if not new_text:
                raise ProxyError(422, "invalid_request_error", "A fact cannot be empty.")
            done = await longterm.update(token, config, memory_id, new_text) is not None
    except ProxyError as exc:
        return page(request, "error.html", session, exc.status, error=exc.message)
    if not done:
        return page(request, "error.html", session, 404, error=f"No memory {memory_id}.")
    outcome = "deleted" if action == "delete" else "edited"
    return redirect(f"/console/memories?token={token}&user={_q(user)}&message={outcome}")


def _q(value: str) -> str:
    return quote(value, safe="")


@router.get("/tokens/{token}/curated")
async def curated_editor(
    request: Request, session: Signed, token: TokenP, user: Label = "", message: str = ""
) -> Response:
    repo = services_of(request).memory.curated
    memory_md = await repo.get(token, "memory", "")
    user_md = await repo.get(token, "user", user)
    return page(
        request,
        "curated.html",
        session,
        token=token,
        user=user,
        memory_md=memory_md,
        user_md=user_md,
        message="The document was saved." if message == "saved" else "",
    )


@router.post("/tokens/{token}/curated")
async def save_curated(request: Request, session: Signed, token: TokenP) -> Response:
    form = await auth.checked_form(request, session.csrf)
    kind = auth.text(form, "kind")
    user = auth.text(form, "user") if kind == "user" else ""
    body = auth.text(form, "body").replace("\r\n", "\n")
    services = services_of(request)
    if kind not in ("memory", "user") or len(user) > 200:
        return page(request, "error.html", session, 422, error="Unknown document.")
    limit = services.settings.curated_max_bytes
    if len(body.encode()) > limit:
        return page(
            request,
            "error.html",
            session,
            413,
            error=f"Curated documents are limited to {limit} bytes.",
        )
    if "\x00" in body:
        return page(
            request,
            "error.html",
            session,
            422,
            error="The document must not contain NUL characters.",
        )
    if await services.memory.tokens.get(token) is None:
        return page(request, "error.html", session, 404, error=f"No token with id {token}.")
    await services.memory.curated.put(token, "memory" if kind == "memory" else "user", user, body)
    return redirect(f"/console/tokens/{token}/curated?user={_q(user)}&message=saved")


@router.get("/playground")
async def playground_form(request: Request, session: Signed, token: TokenQ = None) -> Response:
    tokens = await token_choices(request)
    return page(
        request,
        "playground.html",
        session,
        tokens=tokens,
        token=token,
        user="",
        question="",
        result=None,
    )


@router.post("/playground")
async def playground(request: Request, session: Signed) -> Response:
    """What the Context Forge would inject for a question now: the same recall and forge as a
    chat request, with no upstream call and nothing stored."""
    form = await auth.checked_form(request, session.csrf)
    tokens = await token_choices(request)
    raw_token = auth.text(form, "token")
    user = auth.text(form, "user")[:200]
    question = auth.text(form, "question")[:4000]
    context: dict[str, Any] = {"tokens": tokens, "user": user, "question": question}
    context["result"] = None
    token = int(raw_token) if raw_token.isdigit() and len(raw_token) < 10 else 0
    context["token"] = token
    if not question.strip():
        return page(request, "playground.html", session, 422, error="Ask a question.", **context)
    services = services_of(request)
    try:
        config = await config_of(request, token)
        turn = Turn(
            request_id="playground",
            scope=Scope(token_id=token, user=user, session=PLAYGROUND_SESSION),
            config=config,
            messages=(Message(role="user", content=question),),
            query=question,
        )
        # The chat path's own recall and forge: the playground shows what a request gets.
        forged = await services.chat.recall(turn)
    except ProxyError as exc:
        return page(request, "playground.html", session, exc.status, error=exc.message, **context)
    candidates = forged.trace["candidates"]
    context["result"] = {
        "trace": forged.trace,
        "kept": [c for c in candidates if c["kept"]],
        "dropped": [c for c in candidates if not c["kept"]],
    }
    return page(request, "playground.html", session, **context)
