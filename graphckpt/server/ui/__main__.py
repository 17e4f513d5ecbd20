"""``python -m graphckpt.server.ui [DB] [--graph MODULE:ATTR ...] [--port N]``: serve the UI over a SQLite file.

``graphckpt serve`` serves the same UI at ``/ui/`` (with SSE, cancel, tokens); this stand-alone server polls and
has no run queue. It looks at one database (the demo's: ``graphckpt demo`` writes
``graphckpt.db``; its threads record ``graphckpt.cli.demo:graph``, which is loaded by default so they can be forked
and resumed from the UI). Listens on 127.0.0.1 only, and answers only a loopback ``Host`` (or one given with
``--allow-host``).
"""

from __future__ import annotations

import argparse

from graphckpt.savers.sqlite import SqliteSaver
from graphckpt.server.ui import create_ui_app
from graphckpt.targets import compile_with, load_target

DEMO = "graphckpt.cli.demo:graph"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m graphckpt.server.ui", description=__doc__)
    parser.add_argument("db", nargs="?", default="graphckpt.db", help="SQLite file (default graphckpt.db)")
    parser.add_argument("--graph", action="append", default=[], help=f"MODULE:ATTR to run threads of (default {DEMO})")
    parser.add_argument("--port", type=int, default=8123)
    parser.add_argument(
        "--allow-host", action="append", default=[], help="a Host name to answer besides loopback names (repeatable)"
    )
    args = parser.parse_args(argv)
    import uvicorn

    saver = SqliteSaver(args.db)
    apps = {ref: compile_with(load_target(ref), saver) for ref in (args.graph or [DEMO])}
    app = create_ui_app(saver, apps, allowed_hosts=args.allow_host)
    print(f"graphckpt UI on http://127.0.0.1:{args.port}/ui/ ({args.db})", flush=True)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
