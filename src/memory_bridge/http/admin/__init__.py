"""The admin API: one parent router under `/v1/admin` that carries the second lock
(`require_admin`, behind the edge's own check), the bearer scheme `/openapi.json` declares and
the error responses every route shares; one module per resource below it."""

from fastapi import APIRouter, Depends

from memory_bridge.http.admin import (
    jobs,
    longterm,
    memory,
    rebuild,
    sessions,
    tokens,
    traces,
    transfer,
    users,
)
from memory_bridge.http.admin.schemas import ADMIN_BEARER, error_responses
from memory_bridge.http.edge import require_admin

router = APIRouter(
    prefix="/v1/admin",
    dependencies=[Depends(require_admin), ADMIN_BEARER],
    responses=error_responses(),
)
# The order is the order of /openapi.json, and of matching: fixed paths before parametrised ones.
for module in (jobs, rebuild, traces, tokens, memory, longterm, sessions, users, transfer):
    router.include_router(module.router)

__all__ = ["router"]
