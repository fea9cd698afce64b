"""Memory templates: files that wrap the long-term memory block into the system prompt."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

PLACEHOLDER = "{memories}"


class TemplateError(RuntimeError):
    """A template file is missing or unusable; the server must not start with it."""


@dataclass(frozen=True, slots=True)
class MemoryTemplate:
    text: str

    def render(self, memories: tuple[str, ...]) -> str:
        # Each recalled item on one line, its whitespace (every line break Python knows,
        # U+2028 and NEL included) collapsed: stored text is what users said, and with its
        # newlines it could fake the block's heading, another item, or the end of the block
        # and instructions after it. The Gateway reference is rendered the same way.
        items = (one_line(m) for m in memories)
        listing = "\n".join(f"- {m}" for m in items if m)
        # str.replace, not str.format: templates may contain other braces.
        return self.text.replace(PLACEHOLDER, listing).strip()


def one_line(text: str) -> str:
    """`text` with every run of whitespace, line breaks included, made one space."""
    return " ".join(text.split())


def load_template(path: Path) -> MemoryTemplate:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TemplateError(f"memory template not found: {path}") from None
    except OSError as exc:
        raise TemplateError(f"memory template unreadable: {path} ({exc.strerror})") from None
    if PLACEHOLDER not in text:
        raise TemplateError(f"memory template {path} lacks the {PLACEHOLDER} placeholder")
    return MemoryTemplate(text)
