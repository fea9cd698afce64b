"""Memory over time, for one end user: the long-term facts consolidation superseded (with what
superseded them, the dates, and a restore), the session summaries (with the turns each covers),
and fading (when each memory was last injected, its importance and fade factor now)."""

from __future__ import annotations

import logging
import time
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, Path, Query, Request
from sqlalchemy import Connection, select
from starlette.responses import Response

from memory_bridge.context.forge import fade
from memory_bridge.context.forge.intent import Intent
from memory_bridge.core.errors import ProxyError
from memory_bridge.core.timestamps import epoch_of
from memory_bridge.events import log as event_log
from memory_bridge.events.model import EventType, session_aggregate
from memory_bridge.http.console import session as auth
from memory_bridge.http.console.memories import config_of
from memory_bridge.http.console.views import PAGE, offset_of, page, redirect, token_choices
from memory_bridge.http.services import Services, services_of
from memory_bridge.sources.episodic_points import summary_point_id
from memory_bridge.sources.longterm import config as mem0_config
from memory_bridge.sources.longterm.consolidator import Consolidator
from memory_bridge.storage.console_sessions import ConsoleSession
from memory_bridge.storage.tables import memory_events
from memory_bridge.tenancy.config import TokenConfig

log = logging.getLogger(__name__)
router = APIRouter()
Signed = Annotated[ConsoleSession, Depends(auth.current)]
TokenQ = Annotated[int | None, Query(ge=1, le=2**31 - 1)]
TokenP = Annotated[int, Path(ge=1, le=2**31 - 1)]
Label = Annotated[str, Query(max_length=200)]
MemoryId = Annotated[str, Path(pattern=r"^[0-9a-f-]{36}$")]
MAX_COVERS_SHOWN = 60  # links to a summary's covered turns; the rest are counted


@router.get("/evolving")
async def evolving(
    request: Request,
    session: Signed,
    token: TokenQ = None,
    user: Label = "",
    message: Annotated[str, Query(max_length=100)] = "",
) -> Response:
    tokens = await token_choices(request)
    token = token or (tokens[0]["id"] if tokens else None)
    offset = offset_of(request)
    context: dict[str, Any] = {"superseded": [], "summaries": [], "uses": [], "rules": None}
    error = ""
    if token is not None:
        try:
            config = await config_of(request, token)
            context = await _sections(services_of(request), token, config, user, offset)
        except ProxyError as exc:
            error = exc.message
        except Exception as exc:
            log.warning("console: memory over time failed (%s)", type(exc).__name__)
            error = f"Reading the memory failed ({type(exc).__name__})."
    return page(
        request,
        "evolving.html",
        session,
        tokens=tokens,
        token=token,
        user=user,
        offset=offset,
        size=PAGE,
        error=error,
        message="The fact was restored." if message == "restored" else "",
        **context,
    )


async def _sections(
    services: Services, token: int, config: TokenConfig, user: str, offset: int
) -> dict[str, Any]:
    rules = services.chat.rules_for(config.memory_config.forge, Intent.FACTUAL)
    now = time.time()
    superseded: list[dict[str, Any]] = []
    if mem0_config.enabled(config):
        superseded = await services.memory.longterm.facts.superseded_facts(token, user)
    found = await services.memory.db.run(lambda conn: _summaries(conn, token, user, offset))
    summaries = [_summary(e) for e in found[:PAGE]]
    uses: list[dict[str, Any]] = []
    access = services.memory.access
    if fade.enabled(rules) and access is not None:
        ids = [("episodic", s["point_id"]) for s in summaries]
        used = await access.last_used(token, user, ids)
        for s in summaries:
            s["fading"] = fade.reading("episodic", s["point_id"], s["at"], None, used, now, rules)
        listed = await access.of_user(token, user, PAGE + 1, offset)
        more_uses = len(listed) > PAGE
        for use in listed[:PAGE]:
            key = {f"{use.source}:{use.item_id}": use.last_used_at}
            factor = fade.reading(use.source, use.item_id, None, use.importance, key, now, rules)
            uses.append({"use": use, **factor})
    else:
        more_uses = False
    return {
        "superseded": superseded[offset : offset + PAGE],
        "summaries": summaries,
        # One offset pages the three lists together.
        "has_more": len(found) > PAGE or len(superseded) > offset + PAGE or more_uses,
        "uses": uses,
        "rules": rules if fade.enabled(rules) else None,
    }


def _summaries(conn: Connection, token: int, user: str, offset: int) -> list[Any]:
    """A page of the end user's session summaries, the newest first (their sessions' events
    share the prefix of the user's session aggregates)."""
    prefix = session_aggregate(token, user, "")
    query = (
        select(memory_events)
        .where(
            memory_events.c.token_id == token,
            memory_events.c.type == EventType.SESSION_SUMMARISED.value,
            memory_events.c.aggregate_id.startswith(prefix, autoescape=True),
        )
        .order_by(memory_events.c.id.desc())
        .limit(PAGE + 1)
        .offset(offset)
    )
    return [event_log.stored_event(row) for row in conn.execute(query)]


def _summary(event: Any) -> dict[str, Any]:
    payload = event.payload
    covers = [str(c) for c in payload.get("covers") or ()]
    return {
        "id": event.event_id,
        "point_id": summary_point_id(event.event_id),
        "session": str(payload.get("session", "")),
        "text": str(payload.get("text", "")),
        "covers": covers[:MAX_COVERS_SHOWN],
        "covered": len(covers),
        "at": epoch_of(payload.get("last_at")),
        "summarised_at": event.created_at,
    }


@router.post("/evolving/{token}/{memory_id}/restore")
async def restore(
    request: Request, session: Signed, token: TokenP, memory_id: MemoryId
) -> Response:
    """Put a superseded fact back among the live ones, as `POST …/memories/{id}/restore`."""
    form = await auth.checked_form(request, session.csrf)
    user = auth.text(form, "user")[:200]
    services = services_of(request)
    try:
        config = await config_of(request, token)
        if not mem0_config.enabled(config):
            raise ProxyError(409, "conflict_error", "Long-term memory is off for this token.")
        done = await Consolidator(services.memory.longterm).restore(token, config, memory_id)
    except ProxyError as exc:
        return page(request, "error.html", session, exc.status, error=exc.message)
    if not done:
        return page(request, "error.html", session, 404, error=f"No superseded fact {memory_id}.")
    log.info("console: token %d: long-term memory %s restored", token, memory_id)
    return redirect(f"/console/evolving?token={token}&user={quote(user, safe='')}&message=restored")
