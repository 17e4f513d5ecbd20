"""The compiled graph drawn as a small inline SVG, server-side: :func:`graph_svg`.

Layout: each node's layer is its shortest distance from ``START`` along the graph's possible successors
(:meth:`~graphckpt.compiled.CompiledGraph.successors`), ``END`` below every node; a layer's nodes sit side by side.
Edges going down are straight; edges going back up or sideways (loops, retries) are curves on the right. Plain edges
are solid, conditional ones (routers, ``goto`` destinations) dashed. Nodes carry CSS classes the stylesheet colours:
``current`` (ran in the shown checkpoint's step), ``next`` (in its frontier), ``done`` (ran earlier in the lineage),
``failed`` (failed at the head of a failed thread).
No script, no external reference: the drawing is readable with JavaScript off and in a saved page.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection
from html import escape

from graphckpt.compiled import CompiledGraph
from graphckpt.control import END, START

__all__ = ["graph_svg"]

BOX_W, BOX_H, GAP_X, GAP_Y, PAD = 132, 34, 24, 30, 16


def _layers(graph: CompiledGraph) -> dict[str, int]:
    succ = graph.successors()
    depth = {START: 0}
    queue = deque([START])
    while queue:
        n = queue.popleft()
        for m in sorted(succ.get(n, ())):
            if m != END and m not in depth:
                depth[m] = depth[n] + 1
                queue.append(m)
    bottom = max(depth.values(), default=0) + 1
    for n in graph.nodes:  # unreachable from START (only a goto target, say): below the rest
        depth.setdefault(n, bottom)
    depth[END] = max(depth.values()) + 1
    return depth


def graph_svg(
    graph: CompiledGraph,
    *,
    current: Collection[str] = (),
    next: Collection[str] = (),
    done: Collection[str] = (),
    failed: Collection[str] = (),
) -> str:
    """The SVG markup (an ``<svg>`` element with a title and a text description) of ``graph``'s nodes and edges."""
    depth = _layers(graph)
    rows: dict[int, list[str]] = {}
    for n in [START, *graph.nodes, END]:
        rows.setdefault(depth[n], []).append(n)
    widest = max(len(r) for r in rows.values())
    width = PAD * 2 + widest * BOX_W + (widest - 1) * GAP_X + 40
    height = PAD * 2 + len(rows) * BOX_H + (len(rows) - 1) * GAP_Y
    pos: dict[str, tuple[float, float]] = {}
    for d, names in rows.items():
        row_w = len(names) * BOX_W + (len(names) - 1) * GAP_X
        x0 = (width - 40 - row_w) / 2
        for i, n in enumerate(names):
            pos[n] = (x0 + i * (BOX_W + GAP_X), PAD + d * (BOX_H + GAP_Y))

    edges: list[tuple[str, str, bool]] = [(a, b, False) for a, b in graph.edges]
    edges += [(s, j.target, False) for j in graph.joins for s in j.sources]
    for br in graph.branches:
        targets = br.path_map.values() if br.path_map is not None else [*graph.nodes, END]
        edges += [(br.source, t, True) for t in targets]
    edges += [(spec.name, d, True) for spec in graph.nodes.values() for d in spec.destinations]

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="graph" viewBox="0 0 {width:.0f} {height:.0f}" '
        f'width="{width:.0f}" height="{height:.0f}" role="img" aria-labelledby="graph-title graph-desc">',
        '<title id="graph-title">The graph</title>',
        f'<desc id="graph-desc">{escape(_describe(graph, current, next))}</desc>',
        '<defs><marker id="arrow" viewBox="0 0 8 8" refX="8" refY="4" markerWidth="7" markerHeight="7" '
        'orient="auto-start-reverse"><path d="M0,0 L8,4 L0,8 z" class="arrowhead"/></marker></defs>',
    ]
    seen: set[tuple[str, str]] = set()
    loop = 0
    for a, b, dashed in edges:
        if (a, b) in seen or a not in pos or b not in pos:
            continue
        seen.add((a, b))
        (ax, ay), (bx, by) = pos[a], pos[b]
        style = ' class="edge dashed"' if dashed else ' class="edge"'
        if depth[b] > depth[a]:
            x1, y1, x2, y2 = ax + BOX_W / 2, ay + BOX_H, bx + BOX_W / 2, by
            out.append(f'<path d="M{x1:.0f},{y1:.0f} L{x2:.0f},{y2:.0f}"{style} marker-end="url(#arrow)"/>')
        else:  # back or sideways: a curve on the right
            loop += 1
            x1, y1, x2, y2 = ax + BOX_W, ay + BOX_H / 2, bx + BOX_W, by + BOX_H / 2
            bulge = max(x1, x2) + 18 + 8 * loop
            out.append(
                f'<path d="M{x1:.0f},{y1:.0f} C{bulge:.0f},{y1:.0f} {bulge:.0f},{y2:.0f} {x2:.0f},{y2:.0f}"'
                f'{style} marker-end="url(#arrow)"/>'
            )
    for n, (x, y) in pos.items():
        classes = ["node"]
        if n in (START, END):
            classes.append("terminal")
        if n in done:
            classes.append("done")
        if n in current:
            classes.append("current")
        if n in next:
            classes.append("next")
        if n in failed:
            classes.append("failed")
        label = "START" if n == START else "END" if n == END else n
        shown = label if len(label) <= 16 else label[:15] + "…"
        rx = BOX_H / 2 if n in (START, END) else 6
        states = [c for c in classes[1:] if c != "terminal"]
        title = f"{label} ({', '.join(states)})" if states else label
        out.append(
            f'<g class="{" ".join(classes)}"><title>{escape(title)}</title>'
            f'<rect x="{x:.0f}" y="{y:.0f}" width="{BOX_W}" height="{BOX_H}" rx="{rx:.0f}"/>'
            f'<text x="{x + BOX_W / 2:.0f}" y="{y + BOX_H / 2 + 5:.0f}" text-anchor="middle">{escape(shown)}</text></g>'
        )
    out.append("</svg>")
    return "".join(out)


def _describe(graph: CompiledGraph, current: Collection[str], next: Collection[str]) -> str:
    parts = [f"Nodes: {', '.join(graph.nodes)}."]
    if current:
        parts.append(f"Last step ran: {', '.join(sorted(current))}.")
    if next:
        parts.append(f"Next: {', '.join(sorted(next))}.")
    return " ".join(parts)
