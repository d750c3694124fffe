"""A learning curve as Dagster metadata: a small SVG line chart drawn on the asset's page.

Dagster 1.13 renders a markdown metadata value in place (images included, `data:` sources
allowed) only while it is under 1,000 characters; a longer one hides behind a
"[Show Markdown]" link. So the chart is hand-written SVG, not a matplotlib figure: at most
`MAX_POINTS` points with integer coordinates keep the base64 image well under that limit.
"""

import base64

import dagster as dg

WIDTH, HEIGHT, MARGIN = 240, 90, 14
MAX_POINTS = 36
INLINE_LIMIT = 1000
"""Characters of markdown the UI renders in place (`MetadataEntry.tsx`, `expandSmallValues`)."""


def _sampled(values: list[float]) -> list[tuple[int, float]]:
    """At most MAX_POINTS (index, value) pairs, evenly spread, first and last kept."""
    if len(values) <= MAX_POINTS:
        return list(enumerate(values))
    step = (len(values) - 1) / (MAX_POINTS - 1)
    return [(round(i * step), values[round(i * step)]) for i in range(MAX_POINTS)]


def _number(value: float) -> str:
    return f"{value:.3g}"


def curve_svg(values: list[float], label: str, *, bounded: bool) -> str:
    """The curve of `values` against their index; y spans [0, 1] when `bounded` (rewards),
    else the values' own range."""
    low, high = (0.0, 1.0) if bounded else (min(values), max(values))
    span = (high - low) or 1.0
    last = max(len(values) - 1, 1)
    points = " ".join(
        f"{MARGIN + round(i / last * (WIDTH - 2 * MARGIN))},"
        f"{HEIGHT - MARGIN - round((v - low) / span * (HEIGHT - 2 * MARGIN))}"
        for i, v in _sampled(values)
    )
    end_x, end_y = points.rsplit(" ", 1)[-1].split(",")
    caption = f"{label[:28]} {len(values) - 1}: {_number(values[-1])}"
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        'font-family="sans-serif" font-size="9">'
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="#fff" stroke="#ccc"/>'
        f'<text x="3" y="10">{caption}</text>'
        f'<text x="3" y="{HEIGHT - 3}">{_number(low)} to {_number(high)}</text>'
        f'<polyline fill="none" stroke="#2563eb" stroke-width="2" points="{points}"/>'
        f'<circle cx="{end_x}" cy="{end_y}" r="3" fill="#2563eb"/></svg>'
    )


def curve_metadata(
    name: str, values: list[float], label: str, *, bounded: bool
) -> dict[str, dg.MetadataValue]:
    """`{name: <markdown image>}`, or nothing for a curve without points."""
    if not values:
        return {}
    svg = base64.b64encode(curve_svg(values, label, bounded=bounded).encode()).decode()
    markdown = f"![{name.replace('_', ' ')}](data:image/svg+xml;base64,{svg})"
    return {name: dg.MetadataValue.md(markdown)}
