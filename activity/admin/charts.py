"""Server-rendered SVG charts for the dashboard (bars, and the retention heatmap): no JavaScript
library or CDN, styled by the admin's CSS variables (so light and dark themes), each bar's or
cell's value in ``data-*`` attributes for tests."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from typing import Any

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

WIDTH, HEIGHT = 600, 160
TOP, BOTTOM, LEFT, RIGHT = 12, 22, 44, 8  # margins: value labels left, day labels below


def bar_chart(
    label: str, points: Sequence[tuple[date, int | None]], highlight: date | None = None, live: str = ""
) -> SafeString:
    """Bars for (day, value) points, oldest first; a None value (no figure) draws a hollow stub.
    ``live`` names the figure of the live stream's events that the highlighted bar follows
    (``active.day``): the page's script redraws the bars with it (``data-plot-*`` give the scale)."""
    peak = max((value for _, value in points if value), default=0) or 1
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    step = plot_w / max(len(points), 1)
    bars = []
    for n, (day, value) in enumerate(points):
        x = LEFT + n * step + step * 0.1
        height = 0.0 if value is None else plot_h * value / peak
        classes = "bar" + (" missing" if value is None else "") + (" live" if day == highlight else "")
        shown = "no figure" if value is None else f"{value:,}"
        bars.append(
            (
                classes,
                f"{x:.1f}",
                f"{TOP + plot_h - max(height, 1):.1f}",
                f"{step * 0.8:.1f}",
                f"{max(height, 1):.1f}",
                "" if value is None else value,
                day.isoformat(),
                f"{day:%a %d %b}: {shown}",
            )
        )
    rects = format_html_join(
        "",
        '<rect class="{}" x="{}" y="{}" width="{}" height="{}" data-value="{}" data-day="{}"><title>{}</title></rect>',
        bars,
    )
    days = (
        format_html(
            '<text class="axis" x="{}" y="{}">{}</text><text class="axis end" x="{}" y="{}">{}</text>',
            LEFT,
            HEIGHT - 6,
            f"{points[0][0]:%d %b}",
            WIDTH - RIGHT,
            HEIGHT - 6,
            f"{points[-1][0]:%d %b}",
        )
        if points
        else ""
    )
    return format_html(
        '<svg class="activity-chart" viewBox="0 0 {w} {h}" role="img" aria-label="{label}" data-live="{live}" '
        'data-plot-top="{top}" data-plot-height="{plot_h}">'
        '<line class="grid" x1="{left}" x2="{right}" y1="{top}" y2="{top}"/>'
        '<line class="grid" x1="{left}" x2="{right}" y1="{base}" y2="{base}"/>'
        '<text class="axis end peak" x="{tick}" y="{top_text}">{peak}</text>'
        '<text class="axis end" x="{tick}" y="{base}">0</text>'
        "{rects}{days}</svg>",
        w=WIDTH,
        h=HEIGHT,
        label=label,
        live=live,
        plot_h=plot_h,
        left=LEFT,
        right=WIDTH - RIGHT,
        top=TOP,
        base=TOP + plot_h,
        tick=LEFT - 6,
        top_text=TOP + 4,
        peak=f"{peak:,}",
        rects=rects,
        days=days,
    )


HEAT_LEFT, HEAT_TOP, HEAT_ROW = 92, 18, 20  # the cohorts' labels, the periods' header, a row's height


def heatmap(label: str, table: dict[str, Any]) -> SafeString:
    """A retention table (``services.cohorts``'s answer) as cohorts x periods: each cell's share
    of its cohort as the fill's opacity and as text, the count on hover (``<title>``) and in
    ``data-count``; a null cell (no one can count it) is drawn hollow."""
    cohorts = table["cohorts"]
    columns = max((len(row["retained"]) for row in cohorts), default=0) or 1
    step = (WIDTH - HEAT_LEFT - RIGHT) / columns
    height = HEAT_TOP + HEAT_ROW * len(cohorts) + 4
    unit = "day" if table["period"] == "day" else "week"
    header = format_html_join(
        "",
        '<text class="axis middle" x="{}" y="{}">{}</text>',
        ((f"{HEAT_LEFT + (k + 0.5) * step:.1f}", HEAT_TOP - 6, f"+{k}") for k in range(columns)),
    )
    cells, labels = [], []
    for n, row in enumerate(cohorts):
        y = HEAT_TOP + n * HEAT_ROW
        start = date.fromisoformat(row["start"])
        labels.append((HEAT_LEFT - 6, f"{y + HEAT_ROW * 0.7:.1f}", f"{start:%d %b}", f"{row['size']:,}"))
        for k, count in enumerate(row["retained"]):
            share = None if count is None or not row["size"] else count / row["size"]
            shown = "not kept" if count is None else f"{count:,} of {row['size']:,}"
            cells.append(
                (
                    "cell" + (" missing" if count is None else ""),
                    f"{HEAT_LEFT + k * step + 1:.1f}",
                    f"{y + 1:.1f}",
                    f"{step - 2:.1f}",
                    HEAT_ROW - 2,
                    f"{max(share or 0.0, 0.04 if count else 0.0):.3f}",
                    row["start"],
                    k,
                    "" if count is None else count,
                    row["size"],
                    f"{row['start']} +{k} {unit}{'' if k == 1 else 's'}: {shown}",
                    f"{HEAT_LEFT + (k + 0.5) * step:.1f}",
                    f"{y + HEAT_ROW * 0.7:.1f}",
                    "" if share is None else f"{share:.0%}",
                )
            )
    rects = format_html_join(
        "",
        '<g><rect class="{}" x="{}" y="{}" width="{}" height="{}" fill-opacity="{}" data-cohort="{}" data-k="{}" '
        'data-count="{}" data-size="{}"><title>{}</title></rect><text class="share" x="{}" y="{}">{}</text></g>',
        cells,
    )
    rows = format_html_join(
        "", '<text class="axis end" x="{}" y="{}">{} <tspan class="size">({})</tspan></text>', labels
    )
    return format_html(
        '<svg class="activity-chart activity-heatmap" viewBox="0 0 {w} {h}" role="img" aria-label="{label}">'
        "{header}{rows}{rects}</svg>",
        w=WIDTH,
        h=height,
        label=label,
        header=header,
        rows=rows,
        rects=rects,
    )


FUNNEL_LEFT, FUNNEL_ROW = 160, 22  # the steps' labels, a step's row height
FUNNEL_FIGURES = 150  # room after the longest bar for its figures


def funnel_bars(label: str, steps: Sequence[dict[str, Any]]) -> SafeString:
    """A funnel report's steps (``services.funnels.report``'s) as horizontal bars, step 1's people
    the full width: each bar's people, conversion and drop-off as text and in ``data-*``."""
    first = steps[0]["people"] if steps else 0
    plot_w = WIDTH - FUNNEL_LEFT - RIGHT - FUNNEL_FIGURES
    rows = []
    for n, step in enumerate(steps):
        y, width = 4 + n * FUNNEL_ROW, plot_w * step["people"] / first if first else 0.0
        text_y = f"{y + FUNNEL_ROW * 0.65:.1f}"
        shown = f"{step['people']:,} · {step['conversion']:.0%}" + (f" · {step['dropped']:,} dropped" if n else "")
        rows.append(
            (
                FUNNEL_LEFT - 6,
                text_y,
                f"{step['step']}. {step['path']}"[:28],
                FUNNEL_LEFT,
                y,
                f"{max(width, 1):.1f}",
                FUNNEL_ROW - 6,
                step["step"],
                step["people"],
                step["conversion"],
                step["dropped"],
                f"step {step['step']} {step['path']}: {step['people']:,} people, {step['conversion']:.0%} of step 1, "
                f"{step['from_previous']:.0%} of the previous step, {step['dropped']:,} dropped",
                f"{FUNNEL_LEFT + width + 6:.1f}",
                text_y,
                shown,
            )
        )
    bars = format_html_join(
        "",
        '<g><text class="axis end" x="{}" y="{}">{}</text><rect class="bar" x="{}" y="{}" width="{}" height="{}" '
        'data-step="{}" data-people="{}" data-conversion="{}" data-dropped="{}"><title>{}</title></rect>'
        '<text class="axis" x="{}" y="{}">{}</text></g>',
        rows,
    )
    return format_html(
        '<svg class="activity-chart activity-funnel" viewBox="0 0 {w} {h}" role="img" aria-label="{label}">'
        "{bars}</svg>",
        w=WIDTH,
        h=8 + FUNNEL_ROW * len(steps),
        label=label,
        bars=bars,
    )
