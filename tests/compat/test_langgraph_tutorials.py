"""Three LangGraph tutorials, written for graphckpt with LangGraph's spelling (``examples/lg_*.py``). Each runs on
graphckpt as a user would run it (``python examples/...``), and the review and map-reduce graphs are also built from
the *same source* with only the import line changed to LangGraph's, and give the same result there."""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from support import REPO

EXAMPLES = REPO / "examples"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("lg_react_agent", "Here is the weather: 18 C in paris; 4 C in oslo."),
        ("lg_review", "On durable agents (v2). Mention crashes."),
        ("lg_map_reduce", "Why did the distributed retries cross the road? To be checkpointed."),
    ],
)
def test_the_tutorial_runs_as_a_script(name: str, expected: str, tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, str(EXAMPLES / f"{name}.py")], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == expected
    assert (tmp_path / f"{name.removeprefix('lg_').replace('_agent', '')}.db").exists()


def _graph_part(name: str, imports: str) -> dict[str, Any]:
    """The module's source up to its graphckpt driver, with its graphckpt import line replaced by ``imports``."""
    source = (EXAMPLES / f"{name}.py").read_text()
    graph = source.split("# -- running it with graphckpt")[0]
    lines = [imports if line.startswith("from graphckpt import") else line for line in graph.splitlines()]
    module = types.ModuleType(f"ported_{name}_{len(sys.modules)}")  # a real module: type hints resolve in it
    sys.modules[module.__name__] = module
    exec(compile("\n".join(lines), f"{name}.py (ported)", "exec"), module.__dict__)
    return module.__dict__


def test_map_reduce_gives_langgraphs_result_from_the_same_source() -> None:
    lg = _graph_part(
        "lg_map_reduce", "from langgraph.graph import END, START, StateGraph\nfrom langgraph.types import Send"
    )
    gc = _graph_part("lg_map_reduce", "from graphckpt import END, START, Send, StateGraph")
    config: Any = {"configurable": {"thread_id": "t"}}
    want = lg["builder"].compile(checkpointer=InMemorySaver()).invoke({"topic": "distributed", "jokes": []}, config)
    app = gc["builder"].compile()
    assert app.invoke({"topic": "distributed", "jokes": []}).values == want
    app.close()


def test_review_gives_langgraphs_result_from_the_same_source() -> None:
    lg = _graph_part(
        "lg_review",
        "from langgraph.graph import END, START, StateGraph\nfrom langgraph.types import Command, interrupt",
    )
    gc = _graph_part("lg_review", "from graphckpt import END, START, Command, StateGraph, interrupt")
    lg_app = lg["builder"].compile(checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": "t"}}
    start = {"topic": "durable agents", "revisions": 0, "notes": []}
    lg_app.invoke(start, config)
    lg_app.invoke(lg["Command"](resume={"approve": False, "note": "Mention crashes."}), config)
    want = lg_app.invoke(lg["Command"](resume={"approve": True}), config)

    app = gc["builder"].compile()
    waiting = app.invoke(start, thread_id="t")
    assert waiting.interrupts[0].payload["question"] == "Approve this draft?"
    app.resume("t", gc["Command"](resume={"approve": False, "note": "Mention crashes."}))
    assert app.resume("t", gc["Command"](resume={"approve": True})).values == want
    app.close()
