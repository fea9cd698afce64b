"""The MCP tools' arguments: one pydantic model per tool, the single source of both the JSON
schema `tools/list` announces and the validation of a call's arguments."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from memory_bridge.lifecycle.explicit import MAX_CHARS

MAX_USER = 200  # as on the chat path (`user` / X-User-Id)
MAX_QUERY = 4000

User = Annotated[
    str | None,
    Field(
        default=None,
        max_length=MAX_USER,
        description="The end user whose memory this is; defaults to the X-User-Id header, "
        "else the token-wide memory.",
    ),
]
NotBlank = StringConstraints(strip_whitespace=False, min_length=1, pattern=r"\S")


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SearchArgs(_Args):
    query: Annotated[
        str, NotBlank, Field(max_length=MAX_QUERY, description="What to recall memory for.")
    ]
    user: User = None
    limit: Annotated[int, Field(ge=1, le=50, description="At most this many ranked items.")] = 10


class AddArgs(_Args):
    text: Annotated[
        str, NotBlank, Field(max_length=MAX_CHARS, description="The fact to remember, as said.")
    ]
    user: User = None


class ListArgs(_Args):
    user: User = None
    limit: Annotated[int, Field(ge=1, le=100, description="Page size.")] = 20
    cursor: Annotated[
        str | None,
        Field(
            default=None,
            max_length=12,
            pattern=r"^[0-9]+$",
            description="`next_cursor` of the previous page; absent for the first.",
        ),
    ] = None


class DeleteArgs(_Args):
    id: Annotated[
        str,
        Field(
            min_length=36,
            max_length=36,
            pattern=r"^[0-9a-fA-F-]{36}$",
            description="A memory's id, as add_memory or list_memories gave it.",
        ),
    ]
    user: User = None


class ProfileArgs(_Args):
    user: User = None


DESCRIPTIONS: dict[str, tuple[type[_Args], str]] = {
    "search_memory": (
        SearchArgs,
        "What MemoryBridge would recall for this query in a chat request, ranked as it would "
        "inject it: curated MEMORY.md/USER.md, episodic and long-term items (source, date, "
        "score), and the Memory Gateway's reference. Stores nothing.",
    ),
    "add_memory": (
        AddArgs,
        "Remember a fact stated explicitly; the next chat request can recall it. Answers its id.",
    ),
    "list_memories": (
        ListArgs,
        "The end user's memories, a page at a time: long-term facts where the token has "
        "long-term memory, else the facts added with add_memory.",
    ),
    "delete_memory": (
        DeleteArgs,
        "Forget one memory by its id: gone from every index at once.",
    ),
    "get_profile": (
        ProfileArgs,
        "The curated profile: the token's MEMORY.md and the end user's USER.md.",
    ),
}


def input_schema(model: type[_Args]) -> dict[str, Any]:
    schema = model.model_json_schema()
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
    return schema
