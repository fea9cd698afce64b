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
        """The block for `memories`, each with its date from `dates` (same order) if known."""
        label = DATE_LABELS.get(self.language, DATE_LABELS["en"])
        items = [
            (m.strip(), when)
            for m, when in zip_longest(memories, dates[: len(memories)])
            if m is not None and m.strip()
        ]
        # Stable: undated items keep their order, first; dated ones follow, oldest first.
        items.sort(key=lambda item: (item[1] is not None, item[1] or 0.0))
        lines = []
        for text, when in items:
            day = iso_day(when)
            lines.append(f"- {label.format(date=day)} {text}" if day else f"- {text}")
        # str.replace, not str.format: templates may contain other braces.
        return self.text.replace(PLACEHOLDER, "\n".join(lines)).strip()


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
