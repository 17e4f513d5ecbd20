"""The UI's shipped files: htmx pinned by version and checksum, every asset small, no source maps, no CDN; the SVG
drawing of a graph is well-formed and marks the nodes it is asked to."""

from __future__ import annotations

import hashlib
import re
import xml.etree.ElementTree as ET
from typing import TypedDict

from support import REPO

from graphckpt import END, START, StateGraph
from graphckpt.server.ui.graphsvg import graph_svg

UI = REPO / "graphckpt" / "server" / "ui"
HTMX = UI / "static" / "htmx-2.0.11.min.js"
HTMX_VERSION = "2.0.11"
HTMX_SHA256 = "d6fdc75f204e6bdefa99b69bf1e6d4ac69b8a364f77929f45c13476b4000f717"
"""``dist/htmx.min.js`` of ``npm pack htmx.org@2.0.11``. To upgrade: pack the new version, copy the file, update the
name in templates/base.html, the version and this checksum."""
MAX_ASSET = 200 * 1024


class S(TypedDict, total=False):
    x: int


def test_htmx_is_the_pinned_version_byte_for_byte() -> None:
    data = HTMX.read_bytes()
    assert hashlib.sha256(data).hexdigest() == HTMX_SHA256
    assert f'version:"{HTMX_VERSION}"' in data.decode()
    assert f"htmx-{HTMX_VERSION}.min.js" in (UI / "templates" / "base.html").read_text()


def test_assets_are_small_local_and_without_source_maps() -> None:
    shipped = [p for p in UI.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    assert {p.suffix for p in shipped} <= {".py", ".html", ".css", ".js"}, "only code, templates and assets ship"
    total = 0
    for p in shipped:
        size = p.stat().st_size
        if "static" in p.parts:  # what a browser downloads (the package's Python and templates stay on the server)
            total += size
        assert size < MAX_ASSET, f"{p} is {size} bytes"
        text = p.read_text()
        assert "sourceMappingURL" not in text, f"{p} points at a source map"
        if p.suffix in (".html", ".css"):
            urls = set(re.findall(r"https?://[^\s\"')]+", text))
            assert urls <= {"http://www.w3.org/2000/svg"}, f"{p} refers to {urls}"
    assert total < MAX_ASSET, f"the UI's static assets are {total} bytes"


def test_the_graph_drawing_is_well_formed_and_marks_current_and_next() -> None:
    g = StateGraph(S)
    for n in ("plan", "act", "check"):
        g.add_node(n, lambda s: {})
    g.add_edge(START, "plan")
    g.add_edge("plan", "act")
    g.add_edge("act", "check")
    g.add_conditional_edges("check", lambda s: END, {"again": "act", "done": END})
    svg = graph_svg(g.compile().graph, current={"act"}, next={"check"}, done={"plan", "act"})
    root = ET.fromstring(svg)
    ns = {"s": "http://www.w3.org/2000/svg"}
    groups = {
        e.find("s:title", ns).text.split(" (")[0]: e.get("class").split()
        for e in root.iter("{http://www.w3.org/2000/svg}g")
    }
    assert set(groups) == {"START", "plan", "act", "check", "END"}
    assert "current" in groups["act"] and "next" in groups["check"] and "done" in groups["plan"]
    assert "current" not in groups["check"] and "next" not in groups["act"]
    paths = root.findall(".//s:path[@class='edge dashed']", ns)
    assert len(paths) == 2  # check -> act (back, curved) and check -> END, both conditional
    assert any(" C" in p.get("d") for p in paths), "the loop back to act is a curve"
