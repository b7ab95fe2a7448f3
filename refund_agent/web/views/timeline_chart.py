"""The timeline as a Vega-Lite chart (drawn by ``st.vega_lite_chart``), and the same as text.

One lane per process that wrote the run's steps, and one for the wait for a person; each
quiet stretch longer than the axis's threshold is a grey band labelled with how long it lasted
(``⋯ waited 3 d 4 h ⋯`` when a person was being waited for, ``⋯ 2 h 5 min later ⋯`` else).
The chart carries its data inline, so this module stays pure: a test reads the spec.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .format import clock
from .timeline_marks import KIND_LABELS, KINDS, PERSON_LANE, Axis, Break, Event, duration_text

# One colour per kind of mark (colour-blind-safe Tableau 10 order), and a shape for instants,
# so the kinds differ by more than colour.
COLOURS = {"email": "#4e79a7", "request": "#f28e2b", "tool": "#59a14f", "wait": "#bab0ac",
           "decision": "#e15759", "resume": "#b07aa1", "refund": "#76b7b2",
           "email_out": "#9c755f", "error": "#d62728"}
SHAPES = {"email": "square", "request": "circle", "tool": "circle", "wait": "circle",
          "decision": "diamond", "resume": "triangle-right", "refund": "cross",
          "email_out": "square", "error": "triangle-down"}
LANE_HEIGHT = 34
# A span drawn narrower than this share of the axis is shown as a point instead of a bar.
INSTANT_SHARE = 0.004


# Drawn on the person's lane: the wait, and the decision that ends it (its label names the
# process the person decided in).
PERSON_KINDS = ("wait", "decision")


def lane_of(event: Event, lanes: Mapping[int, str]) -> str:
    if event.pid is None or event.kind in PERSON_KINDS:
        return PERSON_LANE
    return lanes.get(event.pid, f"process {event.pid}")


def break_label(gap: Break, marks: Sequence[Event]) -> str:
    """``⋯ waited 3 d 4 h ⋯`` inside a wait for a person, ``⋯ 3 d 4 h later ⋯`` otherwise."""
    waiting = any(e.kind == "wait" and e.start <= gap.start and gap.end <= e.end for e in marks)
    length = duration_text(gap.seconds)
    return f"⋯ waited {length} ⋯" if waiting else f"⋯ {length} later ⋯"


def lane_order(marks: Sequence[Event], lanes: Mapping[int, str]) -> list[str]:
    """The processes in the order they first did something, the person's lane first."""
    order = [PERSON_LANE] if any(lane_of(e, lanes) == PERSON_LANE for e in marks) else []
    for event in marks:
        lane = lane_of(event, lanes)
        if lane not in order:
            order.append(lane)
    return order


def chart_spec(marks: Sequence[Event], axis: Axis, lanes: Mapping[int, str]) -> dict[str, Any]:
    """A layered Vega-Lite spec: the breaks as bands with their labels, spans as bars, instants
    as points; every mark's tooltip says what, where and when (real clock times)."""
    rows = [{"kind": KIND_LABELS[e.kind], "lane": lane_of(e, lanes), "label": e.label,
             "x": axis.x(e.start), "x2": axis.x(e.end),
             # Too short to see as a bar (a lookup takes milliseconds): drawn as a point.
             "instant": axis.x(e.end) - axis.x(e.start) < INSTANT_SHARE * axis.width,
             "when": clock(e.start) + ("" if e.end == e.start else f" to {clock(e.end)}"
                                       + (" (still waiting)" if e.open else "")),
             "took": "" if e.end == e.start else duration_text(e.seconds)
             + (" so far" if e.open else "")}
            for e in marks]
    gaps = [{"x": b.x, "x2": b.x2, "mid": (b.x + b.x2) / 2, "text": break_label(b, marks),
             "from": clock(b.start), "to": clock(b.end)} for b in axis.breaks]
    order = lane_order(marks, lanes)
    shown = [k for k in KINDS if any(e.kind == k for e in marks)]
    x = {"field": "x", "type": "quantitative", "scale": {"domain": [0, max(axis.width, 1e-9)]},
         "axis": {"labels": False, "ticks": False, "grid": False,
                  "title": "time (quiet stretches over a minute drawn as ⋯ breaks)"}}
    y = {"field": "lane", "type": "nominal", "sort": order,
         "axis": {"title": None, "labelLimit": 320}}
    colour = {"field": "kind", "type": "nominal", "title": None,
              "scale": {"domain": [KIND_LABELS[k] for k in shown],
                        "range": [COLOURS[k] for k in shown]},
              "legend": {"orient": "bottom", "columns": 4, "labelLimit": 200}}
    tooltip = [{"field": "label", "title": "what"}, {"field": "lane", "title": "where"},
               {"field": "when", "title": "when"}, {"field": "took", "title": "took"}]
    layers: list[dict[str, Any]] = []
    if gaps:
        layers += [
            {"data": {"values": gaps}, "mark": {"type": "rect", "color": "#e6e6e6"},
             "encoding": {"x": {**x, "field": "x"}, "x2": {"field": "x2"},
                          "tooltip": [{"field": "text", "title": "break"},
                                      {"field": "from", "title": "from"},
                                      {"field": "to", "title": "to"}]}},
            {"data": {"values": gaps},
             "mark": {"type": "text", "baseline": "bottom", "dy": -4, "fontSize": 12,
                      "color": "#555"},
             "encoding": {"x": {**x, "field": "mid"}, "y": {"value": 0},
                          "text": {"field": "text"}}},
        ]
    layers += [
        {"data": {"values": [r for r in rows if not r["instant"]]},
         "mark": {"type": "bar", "height": 14, "cornerRadius": 2},
         "encoding": {"x": x, "x2": {"field": "x2"}, "y": y, "color": colour,
                      "tooltip": tooltip}},
        {"data": {"values": [r for r in rows if r["instant"]]},
         "mark": {"type": "point", "filled": True, "size": 110, "opacity": 1},
         "encoding": {"x": x, "y": y, "color": colour,
                      "shape": {"field": "kind", "type": "nominal", "legend": None,
                                "scale": {"domain": [KIND_LABELS[k] for k in shown],
                                          "range": [SHAPES[k] for k in shown]}},
                      "tooltip": tooltip}},
    ]
    return {
        "$schema": "https://vega.github.io/schema/vega-lite/v5.json",
        "height": {"step": LANE_HEIGHT},
        "padding": {"top": 22},
        # SVG, not canvas: the marks and the breaks' labels are then text in the page, for
        # screen readers and for the browser test alike.
        "usermeta": {"embedOptions": {"renderer": "svg"}},
        "layer": layers,
        "resolve": {"scale": {"x": "shared"}},
    }


def summary(marks: Sequence[Event], axis: Axis, lanes: Mapping[int, str]) -> str:
    """One sentence for those who cannot see the chart: the lanes, the waits, the takeovers."""
    processes = [lane for lane in lane_order(marks, lanes) if lane != PERSON_LANE]
    parts = [f"{len(processes)} process{'es' if len(processes) != 1 else ''}: "
             + ", ".join(processes)]
    parts += [break_label(b, marks).strip("⋯ ") for b in axis.breaks]
    parts += [e.label for e in marks if e.kind in ("decision", "resume")]
    return "; ".join(parts) + "."


def rows_text(marks: Sequence[Event], lanes: Mapping[int, str]) -> list[str]:
    """The marks as lines of text, oldest first: ``10:02:27 · process 8616 · model request 1``."""
    out = []
    for e in marks:
        took = "" if e.end == e.start else f" · {duration_text(e.seconds)}" + (
            " so far" if e.open else "")
        out.append(f"{clock(e.start)} · {lane_of(e, lanes)} · {e.label}{took}")
    return out
