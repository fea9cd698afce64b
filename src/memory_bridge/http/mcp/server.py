"""`/mcp`: MemoryBridge's memory as MCP tools, over the protocol's streamable HTTP transport,
on the official `mcp` SDK's low-level server (docs/mcp.md, docs/decisions.md).

The edge authenticates the request before any MCP message is read (a service token only; the
admin token and unknown tokens are refused there) and bounds its body as on chat; the SDK's
session manager then runs statelessly, one transport per POST answered with JSON, so every
request carries, and is checked for, its own token. Each tool call is audited
(`mcp_tool_called`, tool and outcome only) and counted in `/metrics`; its errors are tool
errors with a clear message, never a traceback.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from prometheus_client import Counter
from pydantic import BaseModel, ValidationError
from starlette.requests import Request

from memory_bridge.core.errors import ProxyError
from memory_bridge.core.turn import DEFAULT_SESSION, TOKEN_WIDE_USER
from memory_bridge.core.turn import Scope as MemoryScope
from memory_bridge.http.mcp import tools
from memory_bridge.http.mcp.schemas import DESCRIPTIONS, MAX_USER, input_schema
from memory_bridge.http.services import services_in
from memory_bridge.storage.tokens import Principal

log = logging.getLogger(__name__)

AUDIT_TYPE = "mcp_tool_called"
CALLS = Counter(
    "memorybridge_mcp_tool_calls_total",
    "MCP tool calls, by tool and outcome (ok, refused, invalid, failed).",
    ["tool", "outcome"],
)
_UNBOUNDED_HERE = 1 << 62
_UNKNOWN = "unknown"  # the label of a call to a tool that does not exist
Run = Callable[[tools.Caller, Any], Awaitable[dict[str, Any]]]
_RUN: dict[str, Run] = {
    "search_memory": tools.search_memory,
    "add_memory": tools.add_memory,
    "list_memories": tools.list_memories,
    "delete_memory": tools.delete_memory,
    "get_profile": tools.get_profile,
}
_INSTRUCTIONS = (
    "The memory MemoryBridge gives this agent's chat requests: search it, add a fact, list, "
    "forget, and read the curated profile."
)


def create_session_manager() -> StreamableHTTPSessionManager:
    """The SDK's session manager over our tools; `http.mcp_session` runs it and hands it the
    requests."""
    server: Server[Any] = Server(
        "memorybridge",
        version="0.1.0",
        instructions=_INSTRUCTIONS,
        on_list_tools=_list_tools,
        on_call_tool=_call_tool,
    )
    return StreamableHTTPSessionManager(
        app=server,
        stateless=True,
        json_response=True,
        # The edge bounds the body (size, time, rate) as on chat and answers in its own shape;
        # the SDK's own check, on the declared length only, would answer first in another.
        max_request_body_size=_UNBOUNDED_HERE,
    )


async def _list_tools(
    ctx: Any, params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    return types.ListToolsResult(
        tools=[
            types.Tool(name=name, description=text, input_schema=input_schema(model))
            for name, (model, text) in DESCRIPTIONS.items()
        ]
    )


async def _call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    request = getattr(ctx, "request", None)
    if not isinstance(request, Request):  # only the HTTP transport serves these tools
        raise RuntimeError("MCP tool call without its HTTP request")
    name = params.name if params.name in DESCRIPTIONS else _UNKNOWN
    audited: MemoryScope | None = None  # whose memory the call was about, once known
    outcome = "failed"
    try:
        caller = _caller(request)
        audited = caller.scope
        args = _arguments(params)
        audited = _scope_of(caller, args)
        result = await _execute(caller, params.name, args)
        outcome = "ok"
        text = json.dumps(result, ensure_ascii=False)
        return types.CallToolResult(
            content=[types.TextContent(text=text)], structured_content=result
        )
    except _Refused as refused:
        outcome = refused.outcome
        return _error(str(refused))
    finally:
        CALLS.labels(name, outcome).inc()
        if audited is not None:
            await _audit(request, audited, name, outcome)


class _Refused(Exception):
    def __init__(self, outcome: str, message: str) -> None:
        super().__init__(message)
        self.outcome = outcome


def _arguments(params: types.CallToolRequestParams) -> BaseModel:
    entry = DESCRIPTIONS.get(params.name)
    if entry is None:
        raise _Refused("invalid", f"Unknown tool {params.name[:100]!r}.")
    model, _ = entry
    try:
        return model.model_validate(params.arguments or {})
    except ValidationError as exc:
        # The field and the rule only: never an echo of the value (it may be long or private).
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}"
            for e in exc.errors(include_input=False, include_url=False)
        )
        raise _Refused("invalid", f"Invalid arguments for {params.name}: {problems}") from None


def _scope_of(caller: tools.Caller, args: BaseModel) -> MemoryScope:
    try:
        return caller.of(getattr(args, "user", None))
    except tools.ToolFailed as exc:
        raise _Refused("invalid", str(exc)) from None


async def _execute(caller: tools.Caller, name: str, args: BaseModel) -> dict[str, Any]:
    try:
        return await _RUN[name](caller, args)
    except tools.ToolFailed as exc:
        raise _Refused("refused", str(exc)) from None
    except ProxyError as exc:  # recall's failure policy: its messages name no secret
        raise _Refused("failed", exc.message) from None
    except Exception as exc:
        # The class only: a library's message could quote a URL or a key.
        log.error("MCP tool %s failed: %s", name, type(exc).__name__)
        raise _Refused("failed", f"{name} failed ({type(exc).__name__}).") from None


def _caller(request: Request) -> tools.Caller:
    state = request.scope["state"]
    principal: Principal = state["principal"]  # set by the edge, which refused anything else
    if principal.config is None:
        raise _Refused("refused", "This token cannot use memory.")
    if principal.config.memory_config.passthrough:  # `memory.mode: off`: nothing is kept
        raise _Refused("refused", "This token's memory is off (memory.mode 'off').")
    user = request.headers.get("x-user-id", TOKEN_WIDE_USER)
    session = request.headers.get("x-session-id", DEFAULT_SESSION) or DEFAULT_SESSION
    for label, value in (("X-User-Id", user), ("X-Session-Id", session)):
        if len(value) > MAX_USER or not value.isprintable():
            raise _Refused("invalid", f"{label} must be at most {MAX_USER} printable characters.")
    return tools.Caller(
        services=services_in(request.scope),
        config=principal.config,
        scope=MemoryScope(token_id=principal.token_id, user=user, session=session),
        request_id=str(state.get("request_id", "")),
    )


def _error(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=message)], is_error=True)


async def _audit(request: Request, scope: MemoryScope, tool: str, outcome: str) -> None:
    try:
        audit = services_in(request.scope).memory.audit
        rid = str(request.scope["state"].get("request_id", ""))
        await audit.record(scope, AUDIT_TYPE, rid, {"tool": tool, "outcome": outcome})
    except Exception as exc:  # an audit row never fails the call it records
        log.error("could not audit an MCP tool call: %s", type(exc).__name__)
