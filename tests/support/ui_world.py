"""The database and server the UI tests look at, made by real graphs in real processes.

``python tests/support/ui_world.py build DB``     the demo's threads (done, failed, a fork) and an approval thread
``python tests/support/ui_world.py serve DB PORT`` the stand-alone UI on uvicorn at 127.0.0.1:PORT with the three graphs
``python tests/support/ui_world.py gated DB THREAD`` run the gated graph on THREAD: each node waits for its gate file

The browser tests serve it with ``graphckpt serve`` itself (:data:`SERVED`); there the gated graph's gates are the
files of the database named by ``$UI_WORLD_GATES``.

Graph ids are what threads record in ``tags.graph``: the demo's ``graphckpt.cli.demo:graph``, and this module's
``support.ui_world:approval_graph`` and ``support.ui_world:gated_graph`` (``tests/`` is on ``sys.path`` when it runs:
see ``support.child_env``).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sys
import time
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel

from graphckpt import END, START, StateGraph, append
from graphckpt.app import App
from graphckpt.errors import NodeError
from graphckpt.savers.sqlite import SqliteSaver
from nodes import approval_node
from support.waiting import await_for

DEMO = "graphckpt.cli.demo:graph"
APPROVAL = "support.ui_world:approval_graph"
GATED = "support.ui_world:gated_graph"
GATED_NODES = ("fetch", "plan", "act", "report")
GATE_TIMEOUT = 60.0
SERVED = (DEMO, APPROVAL, GATED)
"""The graph ids ``graphckpt serve`` loads for the browser tests."""


class Deploy(BaseModel):
    service: str
    approved: bool | None = None
    comment: str | None = None
    deployed: bool = False


def approval_graph() -> StateGraph:
    g = StateGraph(Deploy)
    g.add_node("approve", approval_node("Deploy {service} to production?", comment_key="comment"))
    g.add_node("deploy", lambda s: {"deployed": bool(s.approved)})
    g.add_edge(START, "approve")
    g.add_edge("approve", "deploy")
    g.add_edge("deploy", END)
    return g


class GatedJob(BaseModel):
    log: Annotated[list[str], append] = []


def gate(db: str | Path, node: str) -> Path:
    """The file whose existence lets ``node`` of the gated graph finish."""
    return Path(f"{db}.gate.{node}")


def gated_graph(db: str | None = None) -> StateGraph:
    """Four nodes in a row; with ``db`` (default ``$UI_WORLD_GATES``), each waits for its :func:`gate` file."""
    db = db or os.environ.get("UI_WORLD_GATES") or None
    g = StateGraph(GatedJob)

    def make(name: str) -> Any:
        async def node(state: Any) -> dict[str, Any]:
            if db is not None:
                await await_for(gate(db, name).exists, GATE_TIMEOUT, what=f"gate {gate(db, name)} to open")
            return {"log": [f"{name} done"]}

        node.__name__ = name
        return node

    for n in GATED_NODES:
        g.add_node(n, make(n))
    g.add_edge(START, GATED_NODES[0])
    for a, b in itertools.pairwise(GATED_NODES):
        g.add_edge(a, b)
    g.add_edge(GATED_NODES[-1], END)
    return g


class Lookup(BaseModel):
    city: str = "Oslo"
    answer: str = ""


EFFECT = "support.ui_world:effect_graph"


def effect_graph(db: str | None = None) -> StateGraph:
    """One node that journals an external call, then checks: with ``{db}.fail`` present the node fails once after
    the call (the resume answers the call from the journal: a replay); with ``{db}.block`` present the call blocks
    (printing ``in-call``) so a parent can SIGKILL the process inside it (a lost call)."""

    def lookup(city: str) -> str:
        if db is not None and Path(f"{db}.block").exists():
            print("in-call", flush=True)
            time.sleep(GATE_TIMEOUT)
        time.sleep(0.05)
        return f"sunny in {city}"

    def ask(state: Lookup, ctx: Any) -> dict[str, Any]:
        answer = ctx.effect(lookup, state.city)
        flag = Path(f"{db}.fail")
        if db is not None and flag.exists():
            flag.unlink()
            raise ConnectionError("the weather service hung up")
        return {"answer": answer}

    g = StateGraph(Lookup)
    g.add_node("ask", ask)
    g.add_edge(START, "ask")
    g.add_edge("ask", END)
    return g


CALLING = "support.ui_world:calling_graph"


class Forecast(BaseModel):
    city: str = "Oslo"
    answer: str = ""
    approved: bool | None = None
    comment: str | None = None


def calling_graph(db: str | None = None) -> StateGraph:
    """``ask``, whose journaled external call (a model call, say) lasts until the gate file ``{db}.gate.call``
    exists (default ``$UI_WORLD_GATES``): while it waits, the call is in flight; then ``approve`` asks a person
    whether to send the answer (an interrupt)."""
    db = db or os.environ.get("UI_WORLD_GATES") or None

    async def model(city: str) -> str:
        if db is not None:
            await await_for(gate(db, "call").exists, GATE_TIMEOUT, what=f"gate {gate(db, 'call')} to open")
        return f"sunny in {city}"

    async def ask(state: Lookup, ctx: Any) -> dict[str, Any]:
        return {"answer": await ctx.aeffect(model, state.city)}

    g = StateGraph(Forecast)
    g.add_node("ask", ask)
    g.add_node("approve", approval_node("Send the forecast for {city}?", comment_key="comment"))
    g.add_edge(START, "ask")
    g.add_edge("ask", "approve")
    g.add_edge("approve", END)
    return g


DRAFTING = "support.ui_world:drafting_graph"


class Draft(BaseModel):
    title: str = "Rain in Oslo"
    final: dict[str, Any] = {}


def drafting_graph() -> StateGraph:
    """``review`` asks a person to edit a draft (an interrupt whose payload is a JSON object) and keeps the answer."""
    from graphckpt import interrupt

    def review(state: Draft) -> dict[str, Any]:
        answer = interrupt({"question": "Edit the draft before it is sent", "title": state.title, "tags": ["weather"]})
        return {"final": answer}

    g = StateGraph(Draft)
    g.add_node("review", review)
    g.add_edge(START, "review")
    g.add_edge("review", END)
    return g


def demo_graph(db: Path | None = None) -> StateGraph:
    from graphckpt.cli.commands import load_demo

    demo = load_demo()
    graph: StateGraph = demo.build_graph(demo.fault_file(db) if db is not None else None)
    return graph


def build(db: Path) -> None:
    """The threads: ``demo`` (done), ``demo-failed`` (failed at check), ``batch-0..2`` (done), ``deploy-api``
    (waiting in ``approve`` for an answer) and ``deploy-web`` (stopped before ``deploy``)."""
    demo = load_demo_module()
    app = demo_graph(db).compile(saver=SqliteSaver(db))
    with app:
        app.invoke({"request": demo.REQUEST}, thread_id="demo", tags={"graph": DEMO})
        demo.fault_file(db).write_text("check")
        with contextlib.suppress(NodeError):
            app.invoke({"request": demo.REQUEST}, thread_id="demo-failed", tags={"graph": DEMO, "team": "weather"})
        for i in range(3):
            app.invoke({"request": f"write a function number {i}"}, thread_id=f"batch-{i}", tags={"graph": DEMO})
    approvals = approval_graph().compile(saver=SqliteSaver(db))
    with approvals:
        approvals.invoke({"service": "api"}, thread_id="deploy-api", tags={"graph": APPROVAL})
    stops = approval_graph().compile(saver=SqliteSaver(db), interrupt_before=["deploy"])
    with stops:  # approved, then stopped before deploy: a static interrupt, nothing to answer
        stops.invoke({"service": "web"}, thread_id="deploy-web", tags={"graph": APPROVAL})
        stops.resume("deploy-web", True)


def load_demo_module() -> Any:
    from graphckpt.cli.commands import load_demo

    return load_demo()


def apps(db: str, saver: SqliteSaver) -> dict[str, App]:
    return {
        DEMO: demo_graph().compile(saver=saver),
        APPROVAL: approval_graph().compile(saver=saver),
        GATED: gated_graph().compile(saver=saver),
    }


def serve(db: str, port: int) -> None:
    import uvicorn

    from graphckpt.server.ui import create_ui_app

    saver = SqliteSaver(db)
    uvicorn.run(create_ui_app(saver, apps(db, saver)), host="127.0.0.1", port=port, log_level="warning")


def run_gated(db: str, thread_id: str) -> None:
    app = gated_graph(db).compile(saver=SqliteSaver(db))
    with app:
        app.invoke({"log": ["start"]}, thread_id=thread_id, tags={"graph": GATED})


if __name__ == "__main__":
    command, db, *rest = sys.argv[1:]
    if command == "build":
        build(Path(db))
    elif command == "serve":
        serve(db, int(rest[0]))
    elif command == "effect":  # run (or resume) the effect graph on THREAD
        app = effect_graph(db).compile(saver=SqliteSaver(db))
        with app, contextlib.suppress(NodeError):
            if app.saver is not None and rest[0] in {i.thread_id for i in app.threads()}:
                app.resume(rest[0])
            else:
                app.invoke({"city": "Oslo"}, thread_id=rest[0], tags={"graph": EFFECT})
    elif command == "gated":
        run_gated(db, rest[0])
    else:
        raise SystemExit(f"unknown command {command!r}")
