"""`search_memory`'s items are the chat path's placement, item for item: the curated block,
the memory block source by source (each in rank order), then the Gateway reference — even
where the forge's global rank order interleaves the sources."""

from __future__ import annotations

from pathlib import Path

from tests.support.longterm_support import memory_block

from memory_bridge.context.assemble import Placement
from memory_bridge.context.forge.pipeline import forge
from memory_bridge.context.template import load_template
from memory_bridge.core.candidates import Candidate
from memory_bridge.core.messages import Message
from memory_bridge.http.mcp.tools import search_items
from memory_bridge.sources.base import Recall
from memory_bridge.tenancy.ranking import Ranking

NOW = 1_800_000_000.0
TEMPLATE = Path(__file__).resolve().parents[2] / "templates" / "memory_template.md"


def test_items_follow_the_placement_not_the_global_rank() -> None:
    curated = Recall("curated", system_blocks=("## Curated memory\nBe brief.",))
    longterm = Recall("longterm", memories=("Ada is a chemist", "Ada likes tea"))
    episodic = Recall(
        "episodic",
        candidates=(
            Candidate("episodic", "e1", "I sail on Sundays", sparse_rank=1, created_at=NOW),
            Candidate("episodic", "e2", "My boat is blue", dense_rank=1, sparse_rank=2),
        ),
    )
    gateway = Recall("gateway", reference=Message(role="user", content="[Gateway] ref"))
    forged = forge(
        [curated, longterm, episodic, gateway],
        [Message(role="user", content="What do I do on Sundays?")],
        Ranking(recency_weight=0),
        lambda text: len(text.split()),
        NOW,
    )
    ranked_globally = [o.scored.candidate.text for o in forged.kept]
    items = search_items(forged, limit=10)
    texts = [i["text"] for i in items]
    memories = [i["text"] for i in items if i["source"] in ("longterm", "episodic")]

    placement = Placement.of(forged.recalls, load_template(TEMPLATE))
    assert placement is not None
    injected = memory_block(placement.dynamic)
    assert memories == injected and memories != ranked_globally
    assert texts[0] == curated.system_blocks[0] and texts[-1] == "[Gateway] ref"
    assert [i["source"] for i in items] == [
        "curated",
        "longterm",
        "longterm",
        "episodic",
        "episodic",
        "gateway",
    ]
    assert all(i["score"] > 0 and i["rank"] >= 1 for i in items[1:-1])
    dates = {i["text"]: i["date"] for i in items}
    assert dates["I sail on Sundays"] == "2027-01-15T08:00:00+00:00"
    assert dates["Ada is a chemist"] is None  # long-term facts give no date
    assert [i["text"] for i in search_items(forged, limit=1)] == [texts[0], texts[1], texts[-1]]
