"""Server-rendered SVG bar charts: numbers in, markup out (labels escaped), no script."""

from __future__ import annotations

from collections.abc import Sequence

from markupsafe import Markup, escape

WIDTH, HEIGHT, PAD = 320, 120, 24


def bars(
    title: str,
    values: Sequence[float],
    first: str,
    last: str,
    unit: str = "",
    second: Sequence[float] = (),
) -> Markup:
    """One bar per value (oldest left); `second`, if given, drawn over it in another colour."""
    top = max([*values, *second, 0.0]) or 1.0
    n = max(len(values), 1)
    step = (WIDTH - PAD) / n
    out = [
        f'<svg viewBox="0 0 {WIDTH} {HEIGHT + 14}" role="img" aria-label="{escape(title)}">',
        f'<line class="axis" x1="{PAD}" y1="{HEIGHT}" x2="{WIDTH}" y2="{HEIGHT}"/>',
        f'<text x="0" y="10">{_fmt(top)}{escape(unit)}</text>',
        f'<text x="0" y="{HEIGHT}">0</text>',
    ]
    # With a second series, each slot holds two bars side by side.
    width = (step - 1) / (2 if second else 1)
    for series, cls, shift in ((values, "bar", 0.0), (second, "bar2", width)):
        for i, value in enumerate(series):
            h = (HEIGHT - 12) * (value / top)
            x = PAD + i * step + shift
            out.append(
                f'<rect class="{cls}" x="{x:.1f}" y="{HEIGHT - h:.1f}" '
                f'width="{max(width, 0.5):.1f}" height="{h:.1f}">'
                f"<title>{_fmt(value)}</title></rect>"
            )
    out.append(f'<text x="{PAD}" y="{HEIGHT + 12}">{escape(first)}</text>')
    out.append(f'<text x="{WIDTH - 40}" y="{HEIGHT + 12}">{escape(last)}</text>')
    out.append("</svg>")
    return Markup("".join(out))  # noqa: S704 - built from numbers and escaped labels only


def _fmt(value: float) -> str:
    return f"{value:.0f}" if value >= 10 or value == int(value) else f"{value:.2f}"
