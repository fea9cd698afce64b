"""Memory templates: files that wrap the recalled memories into the dynamic block.

Each item is listed with the ISO date it was said or learned, labelled in the template's
language, oldest first: the model reads which of two notes is newer (a move, a changed
preference) from the order and the dates. Undated items come first, in the forge's order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import zip_longest
from pathlib import Path

from memory_bridge.core.candidates import iso_day

PLACEHOLDER = "{memories}"
# How an item's date reads in each template language (`tenancy.config.TEMPLATE_LANGUAGES`).
DATE_LABELS = {"en": "[on {date}]", "zh": "[记于 {date}]"}


class TemplateError(RuntimeError):
    """A template file is missing or unusable; the server must not start with it."""


@dataclass(frozen=True, slots=True)
class MemoryTemplate:
    text: str
    language: str = "en"

    def render(self, memories: Sequence[str], dates: Sequence[float | None] = ()) -> str:
        """The block for `memories`, each with its date from `dates` (same order) if known.

        Each recalled item on one line, its whitespace (every line break Python knows, U+2028
        and NEL included) collapsed: stored text is what users said, and with its newlines it
        could fake the block's heading, another item, or the end of the block and instructions
        after it. The Gateway reference is rendered the same way."""
        label = DATE_LABELS.get(self.language, DATE_LABELS["en"])
        pairs = [
            (one_line(m), when)
            for m, when in zip_longest(memories, dates[: len(memories)])
            if m is not None and one_line(m)
        ]
        items = [pairs[i] for i in block_order([when for _, when in pairs])]
        lines = []
        for text, when in items:
            day = iso_day(when)
            lines.append(f"- {label.format(date=day)} {text}" if day else f"- {text}")
        # str.replace, not str.format: templates may contain other braces.
        return self.text.replace(PLACEHOLDER, "\n".join(lines)).strip()


def block_order(dates: Sequence[float | None]) -> list[int]:
    """The order the memory block lists items in, as indices: undated items first in their
    given order, then dated ones oldest first (stable), so the model reads which is newer.
    The MCP search tool lists its items by the same rule."""
    return sorted(range(len(dates)), key=lambda i: (dates[i] is not None, dates[i] or 0.0))


def one_line(text: str) -> str:
    """`text` with every run of whitespace, line breaks included, made one space."""
    return " ".join(text.split())


def load_template(path: Path, language: str = "en") -> MemoryTemplate:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TemplateError(f"memory template not found: {path}") from None
    except OSError as exc:
        raise TemplateError(f"memory template unreadable: {path} ({exc.strerror})") from None
    if PLACEHOLDER not in text:
        raise TemplateError(f"memory template {path} lacks the {PLACEHOLDER} placeholder")
    return MemoryTemplate(text, language)
