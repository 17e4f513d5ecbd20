"""Child process for the subgraph crash test (``test_subgraphs.py``).

Run as ``python tests/subgraph_child.py --backend sqlite|postgres --db PATH-OR-DSN [--schema S] --side FILE``: runs
thread ``t`` of :func:`build_graph` (``a`` -> subgraph ``sub`` (``i1`` -> ``i2`` -> ``i3``) -> ``b``): ``invoke``
when the thread does not exist yet, else ``resume``, and prints ``done <status>``. Every node call appends its name
to ``--side`` (flushed and fsynced) before it returns. With ``--block``, node ``i2`` prints ``blocking`` and then
waits (at most 60 s) for the parent test to SIGKILL this process: a crash in the middle of the subgraph, after its
first inner step was committed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from typing import Annotated

from pydantic import BaseModel

from graphckpt import START, StateGraph, append
from graphckpt.app import App
from support.leasing import await_unleased


class Outer(BaseModel):
    topic: str = ""
    log: Annotated[list[str], append] = []


class Inner(BaseModel):
    log: Annotated[list[str], append] = []
    draft: str = ""


def build_graph(side: str, *, block: bool = False) -> StateGraph:
    def note(name: str) -> None:
        with open(side, "a") as f:
            f.write(name + "\n")
            f.flush()
            os.fsync(f.fileno())

    def node(name: str):  # type: ignore[no-untyped-def]
        def run(state: Inner) -> dict[str, object]:
            if name == "i2" and block:
                print("blocking", flush=True)
                time.sleep(60)
                sys.exit(2)  # never reached when the test kills this process
            note(name)
            return {"log": [name], "draft": state.draft + name}

        return run

    inner = StateGraph(Inner)
    inner.add_sequence([("i1", node("i1")), ("i2", node("i2")), ("i3", node("i3"))])
    inner.add_edge(START, "i1")

    def outer(name: str):  # type: ignore[no-untyped-def]
        def run(state: Outer) -> dict[str, object]:
            note(name)
            return {"log": [name]}

        return run

    g = StateGraph(Outer)
    g.add_node("a", outer("a"))
    g.add_node("sub", inner.compile())
    g.add_node("b", outer("b"))
    g.add_edge(START, "a")
    g.add_edge("a", "sub")
    g.add_edge("sub", "b")
    return g


async def main(args: argparse.Namespace) -> None:
    os.environ.setdefault("GRAPHCKPT_LEASE_SECONDS", "0.5")  # a killed child's thread is crashed that soon
    if args.backend == "sqlite":
        from graphckpt.savers.sqlite import SqliteSaver

        saver = SqliteSaver(args.db)
    else:
        from graphckpt.savers.postgres import PostgresSaver

        saver = PostgresSaver(args.db, schema=args.schema)
    app: App = build_graph(args.side, block=args.block).compile(saver)
    async with app:
        if await saver.get_thread("t") is None:
            snap = await app.ainvoke({"topic": "x"}, thread_id="t")
        else:
            await await_unleased(app, "t")
            snap = await app.aresume("t")
        print(f"done {snap.status}", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", choices=["sqlite", "postgres"], required=True)
    parser.add_argument("--db", required=True)
    parser.add_argument("--schema")
    parser.add_argument("--side", required=True)
    parser.add_argument("--block", action="store_true")
    asyncio.run(main(parser.parse_args()))
