"""Server-rendered SVG bar charts for the dashboard: no JavaScript library or CDN, styled by the
admin's CSS variables (so light and dark themes), each bar's value in ``data-value`` for tests."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

WIDTH, HEIGHT = 600, 160
TOP, BOTTOM, LEFT, RIGHT = 12, 22, 44, 8  # margins: value labels left, day labels below


def bar_chart(label: str, points: Sequence[tuple[date, int | None]], highlight: date | None = None) -> SafeString:
    """Bars for (day, value) points, oldest first; a None value (no figure) draws a hollow stub."""
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
        '<svg class="activity-chart" viewBox="0 0 {w} {h}" role="img" aria-label="{label}">'
        '<line class="grid" x1="{left}" x2="{right}" y1="{top}" y2="{top}"/>'
        '<line class="grid" x1="{left}" x2="{right}" y1="{base}" y2="{base}"/>'
        '<text class="axis end" x="{tick}" y="{top_text}">{peak}</text>'
        '<text class="axis end" x="{tick}" y="{base}">0</text>'
        "{rects}{days}</svg>",
        w=WIDTH,
        h=HEIGHT,
        label=label,
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
