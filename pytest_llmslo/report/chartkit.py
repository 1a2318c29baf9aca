"""The drawing pieces of the SVG chart (``report.svg``): text and the box it takes, axes
with "nice" ticks (1, 2, 5 x 10^k), lines, the legend, and the placing of labels so that
none covers another.

A text's box is computed, not measured: its width is ``CHAR_EM`` of the font size per
character, generous for a sans-serif font, so a box is never smaller than the drawn text.
``Labels`` places each label of a plot area at the first of its candidate spots where its
box covers no label placed before it and, where it can, no marker.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from pytest_llmslo.report.paths import relative_paths

__all__ = [
    "CHAR_EM",
    "HALO",
    "LEGEND_ROW_H",
    "MARGIN",
    "PANEL_H",
    "PANEL_W",
    "Axes",
    "Box",
    "Labels",
    "axes",
    "fmt_tick",
    "legend",
    "nice_ticks",
    "overlaps",
    "polyline",
    "text",
    "text_box",
    "text_width",
]

#: A panel's size, and the room around its plot area for the ticks, labels and title.
PANEL_W = 440
PANEL_H = 330
MARGIN = {"left": 70, "right": 20, "top": 36, "bottom": 52}
LEGEND_ROW_H = 20
FONT = "font-family='sans-serif'"
#: A white outline under a label drawn over the plot, so a line it crosses does not cut it.
HALO = {"stroke": "white", "stroke_width": 3, "paint_order": "stroke", "stroke_linejoin": "round"}
#: A character's advance as a share of the font size: generous for sans-serif digits and
#: lower case, so a label's computed box is never smaller than the drawn text.
CHAR_EM = 0.62

Box = tuple[float, float, float, float]  # left, top, right, bottom


def text_width(text: str, size: float) -> float:
    """The width of ``text`` at font ``size`` as the layout counts it (``CHAR_EM``)."""
    return CHAR_EM * size * len(text)


def text_box(x: float, y: float, text: str, size: float, anchor: str = "start") -> Box:
    """The box of a text drawn at ``x``, baseline ``y``: the ascent above the baseline,
    the descent below it."""
    w = text_width(text, size)
    left = x if anchor == "start" else x - w if anchor == "end" else x - w / 2
    return (left, y - 0.8 * size, left + w, y + 0.25 * size)


def overlaps(a: Box, b: Box, pad: float = 1.0) -> bool:
    return a[0] < b[2] + pad and b[0] < a[2] + pad and a[1] < b[3] + pad and b[1] < a[3] + pad


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """About ``count`` round tick values covering ``[lo, hi]`` (steps of 1, 2 or 5 x
    10^k); the first tick is <= lo and the last >= hi."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError(f"ticks need finite bounds, got {lo!r}, {hi!r}")
    if hi < lo:
        lo, hi = hi, lo
    if hi == lo:
        pad = abs(lo) * 0.1 or 1.0
        lo, hi = lo - pad, hi + pad
    raw = (hi - lo) / max(count, 1)
    mag = 10.0 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1.0, 2.0, 5.0, 10.0) if m * mag >= raw)
    start = math.floor(lo / step + 1e-9) * step
    ticks = []
    value = start
    while value < hi - 1e-9 * step:
        ticks.append(value)
        value = start + len(ticks) * step
    ticks.append(value)
    # Round away float noise such as 0.30000000000000004.
    digits = max(0, -math.floor(math.log10(step))) + 1
    return [round(t, digits) for t in ticks]


def fmt_tick(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 10_000:
        return f"{value / 1000:g}k"
    return f"{value:g}"


class Axes:
    """Maps data to pixels inside one panel."""

    def __init__(self, x0: float, y0: float, xs: Sequence[float], ys: Sequence[float]) -> None:
        self.left = x0 + MARGIN["left"]
        self.right = x0 + PANEL_W - MARGIN["right"]
        self.top = y0 + MARGIN["top"]
        self.bottom = y0 + PANEL_H - MARGIN["bottom"]
        lo_x, hi_x = (min(xs), max(xs)) if xs else (0.0, 1.0)
        lo_y, hi_y = (min(ys), max(ys)) if ys else (0.0, 1.0)
        # A little room past the largest value, so its marker and label are not on the frame.
        hi_x += 0.04 * (hi_x - lo_x)
        hi_y += 0.12 * (hi_y - lo_y)
        # Start at zero when the data is not far from it: a chart of 0.9x..1.1x exaggerates.
        if lo_x >= 0 and lo_x < 0.5 * hi_x:
            lo_x = 0.0
        if lo_y >= 0 and lo_y < 0.5 * hi_y:
            lo_y = 0.0
        self.xticks = nice_ticks(lo_x, hi_x)
        self.yticks = nice_ticks(lo_y, hi_y)

    def x(self, v: float) -> float:
        lo, hi = self.xticks[0], self.xticks[-1]
        return self.left + (v - lo) / (hi - lo) * (self.right - self.left)

    def y(self, v: float) -> float:
        lo, hi = self.yticks[0], self.yticks[-1]
        return self.bottom - (v - lo) / (hi - lo) * (self.bottom - self.top)


class Labels:
    """The labels of one plot area: each placed where its box covers no other label and,
    where it can, no marker."""

    def __init__(self, ax: Axes) -> None:
        self.area: Box = (ax.left + 2, ax.top + 2, ax.right - 2, ax.bottom - 2)
        self.boxes: list[Box] = []
        self.markers: list[Box] = []

    def marker(self, x: float, y: float, r: float) -> None:
        self.markers.append((x - r, y - r, x + r, y + r))

    def _free(self, box: Box, *, markers: bool) -> bool:
        a = self.area
        if box[0] < a[0] or box[2] > a[2] or box[1] < a[1] or box[3] > a[3]:
            return False
        taken = self.boxes + (self.markers if markers else [])
        return not any(overlaps(box, b) for b in taken)

    def place(
        self, x: float, y: float, text: str, size: float, r: float
    ) -> tuple[float, float, str]:
        """Where the label of a mark of radius ``r`` at ``(x, y)`` goes: its ``x``, its
        baseline and its anchor: beside the mark (right, then left), else stacked above
        or below it on either side."""
        step = size + 3
        up, down = -r + 2, r + size - 1
        offsets = [(r + 2, up), (r + 2, down), (-r - 2, up), (-r - 2, down)]
        for k in range(1, 16):
            offsets += [(r + 2, up - k * step), (r + 2, down + k * step)]
            offsets += [(-r - 2, up - k * step), (-r - 2, down + k * step)]
        spots = [(x + dx, y + dy, "start" if dx > 0 else "end") for dx, dy in offsets]
        return self.place_at(text, size, spots)

    def place_at(
        self, text: str, size: float, spots: Sequence[tuple[float, float, str]]
    ) -> tuple[float, float, str]:
        """The first of ``spots`` (x, baseline, anchor) where ``text`` fits: clear of labels
        and markers, else of labels alone, else the first."""
        for markers in (True, False):
            for x, y, anchor in spots:
                box = text_box(x, y, text, size, anchor)
                if self._free(box, markers=markers):
                    self.boxes.append(box)
                    return x, y, anchor
        x, y, anchor = spots[0]
        self.boxes.append(text_box(x, y, text, size, anchor))
        return x, y, anchor


def text(
    x: float, y: float, text: str, *, size: int = 12, anchor: str = "start", **attrs: Any
) -> str:
    # class_ -> class (a keyword), font_weight -> font-weight
    extra = "".join(
        f" {k.rstrip('_').replace('_', '-')}={quoteattr(str(v))}" for k, v in attrs.items()
    )
    return (
        f"<text x='{x:.1f}' y='{y:.1f}' font-size='{size}' text-anchor='{anchor}' {FONT}"
        f"{extra}>{escape(relative_paths(text))}</text>"
    )


def axes(ax: Axes, xlabel: str, ylabel: str, title: str) -> list[str]:
    out = [
        f"<rect x='{ax.left:.1f}' y='{ax.top:.1f}' width='{ax.right - ax.left:.1f}' "
        f"height='{ax.bottom - ax.top:.1f}' fill='white' stroke='#888'/>"
    ]
    for t in ax.xticks:
        px = ax.x(t)
        out.append(
            f"<line x1='{px:.1f}' y1='{ax.top:.1f}' x2='{px:.1f}' y2='{ax.bottom:.1f}' "
            "stroke='#eee'/>"
        )
        out.append(
            f"<line x1='{px:.1f}' y1='{ax.bottom:.1f}' x2='{px:.1f}' y2='{ax.bottom + 5:.1f}' "
            "stroke='#888'/>"
        )
        out.append(text(px, ax.bottom + 18, fmt_tick(t), size=11, anchor="middle"))
    for t in ax.yticks:
        py = ax.y(t)
        out.append(
            f"<line x1='{ax.left:.1f}' y1='{py:.1f}' x2='{ax.right:.1f}' y2='{py:.1f}' "
            "stroke='#eee'/>"
        )
        out.append(
            f"<line x1='{ax.left - 5:.1f}' y1='{py:.1f}' x2='{ax.left:.1f}' y2='{py:.1f}' "
            "stroke='#888'/>"
        )
        out.append(text(ax.left - 8, py + 4, fmt_tick(t), size=11, anchor="end"))
    mid_x = (ax.left + ax.right) / 2
    mid_y = (ax.top + ax.bottom) / 2
    out.append(text(mid_x, ax.bottom + 40, xlabel, anchor="middle", class_="xlabel"))
    out.append(
        text(
            ax.left - 52,
            mid_y,
            ylabel,
            anchor="middle",
            transform=f"rotate(-90 {ax.left - 52:.1f} {mid_y:.1f})",
            class_="ylabel",
        )
    )
    out.append(text(mid_x, ax.top - 12, title, size=13, anchor="middle", font_weight="bold"))
    return out


def polyline(
    points: Sequence[tuple[float, float]],
    color: str,
    *,
    dashed: bool = False,
    opacity: float = 1.0,
    width: float = 2.0,
) -> str:
    coords = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
    dash = " stroke-dasharray='6 4'" if dashed else ""
    return (
        f"<polyline points='{coords}' fill='none' stroke='{color}' stroke-width='{width}'"
        f" stroke-opacity='{opacity}'{dash}/>"
    )


def legend(
    x0: float, y0: float, entries: Sequence[tuple[str, str, str]], width: float
) -> tuple[list[str], float]:
    """Legend items laid out left to right, wrapping; returns the elements and the height."""
    out = ["<g class='legend'>"]
    x, y = x0, y0
    for label, color, style in entries:
        w = 44 + text_width(label, 12)
        if x + w > x0 + width and x > x0:
            x, y = x0, y + LEGEND_ROW_H
        cy = y + LEGEND_ROW_H / 2
        if style == "knee":
            out.append(
                f"<circle cx='{x + 12:.1f}' cy='{cy:.1f}' r='6' fill='none' "
                f"stroke='{color}' stroke-width='2'/>"
            )
        elif style in ("pareto", "slo"):
            out.append(polyline([(x, cy), (x + 24, cy)], color, dashed=True, width=1.5))
        else:
            out.append(
                polyline(
                    [(x, cy), (x + 24, cy)],
                    color,
                    dashed=style == "baseline",
                    opacity=0.45 if style == "baseline" else 1.0,
                )
            )
            out.append(f"<circle cx='{x + 12:.1f}' cy='{cy:.1f}' r='3.5' fill='{color}'/>")
        out.append(text(x + 30, cy + 4, label, size=12))
        x += w
    out.append("</g>")
    return out, y + LEGEND_ROW_H - y0
