"""Child process for ``test_audit_crash.py``: a three-step agent (model call with a tool, the tool, model call) on a
SQLite file, against the loopback OpenAI-compatible server named by ``OPENAI_BASE_URL``.

``python tests/audit_child.py DB THREAD`` runs the thread (``invoke`` if it does not exist, else ``resume``) and
prints ``commit <step>`` after each checkpoint and ``done <status>`` at the end. With ``AUDIT_KILL=tool`` the tool
prints ``in-tool <idempotency key>`` and then blocks (at most 60 s) so the parent can SIGKILL the process inside the
call (with ``AUDIT_FAIL=tool`` it raises ``ConnectionError``: the thread fails); a kill inside a model call needs
nothing here (the parent holds the server's answer back and kills meanwhile).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from pydantic import BaseModel

from graphckpt import END, START, StateGraph, ThreadNotFoundError, current_context
from graphckpt.savers.sqlite import SqliteSaver
from nodes import chat_node, tool, tool_node


class Agent(BaseModel):
    request: str = "weather in Oslo"
    plan: str = ""
    tool_calls: list[dict[str, Any]] = []
    tool_results: list[dict[str, Any]] = []
    final: str = ""


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


@tool
def lookup(city: str) -> dict[str, Any]:
    """The temperature in a city."""
    if os.environ.get("AUDIT_FAIL") == "tool":
        raise ConnectionError("weather service unreachable")
    if os.environ.get("AUDIT_KILL") == "tool":
        say(f"in-tool {current_context().idempotency_key}")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # the parent SIGKILLs us here
            time.sleep(0.05)
    return {"city": city, "celsius": 3}


def build_graph() -> StateGraph:
    g = StateGraph(Agent)
    g.add_node("plan", chat_node("{request}", output_key="plan", tools=[lookup], model="fake-model", timeout=30))
    g.add_node("tools", tool_node([lookup]))
    g.add_node("reply", chat_node(lambda s: f"summarise {s.tool_results}", output_key="final", model="fake-model"))
    g.add_edge(START, "plan")
    g.add_edge("plan", "tools")
    g.add_edge("tools", "reply")
    g.add_edge("reply", END)
    return g


def main(db: str, thread: str) -> int:
    app = build_graph().compile(saver=SqliteSaver(db))
    try:
        try:
            app.get_state(thread)
            stream = app.stream(None, thread_id=thread, mode="checkpoints", resume=True)
        except ThreadNotFoundError:
            stream = app.stream({}, thread_id=thread, mode="checkpoints")
        for snap in stream:
            say(f"commit {snap.step}")
        say(f"done {app.get_state(thread).status}")
    finally:
        app.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
