"""Schema migrations (Alembic), applied by `memory-bridge init` and at every start.

A database made before migrations existed (tables, no `alembic_version`) is stamped at the
baseline first, then upgraded like any other; its sessions and curated documents become
backfilled events once. Applying at start keeps `serve` and `worker` one command each; a
database newer than this code (an unknown revision) is refused with a clear message.
"""

from __future__ import annotations

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, inspect
from sqlalchemy.ext.asyncio import AsyncEngine

BASELINE = "0001"


class SchemaTooNew(RuntimeError):
    pass


def _config(conn: Connection) -> Config:
    config = Config()
    config.set_main_option("script_location", "memory_bridge.storage:migrations")
    config.attributes["connection"] = conn
    return config


def upgrade(conn: Connection) -> None:
    config = _config(conn)
    script = ScriptDirectory.from_config(config)
    current = MigrationContext.configure(conn).get_current_revision()
    if current is None and inspect(conn).has_table("tokens"):
        command.stamp(config, BASELINE)
    elif current is not None and current not in {s.revision for s in script.walk_revisions()}:
        raise SchemaTooNew(
            f"the database is at schema revision {current}, which this version of "
            "MemoryBridge does not know: run a newer version"
        )
    command.upgrade(config, "head")


async def migrate(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        await conn.run_sync(upgrade)
