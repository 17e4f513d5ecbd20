"""``graphckpt serve MODULE:ATTR [NAME=MODULE:ATTR ...]``: the HTTP API of :mod:`graphckpt.server` under uvicorn.

It binds 127.0.0.1 by default and refuses any other address unless bearer tokens are configured (``--tokens-file``
or ``$GRAPHCKPT_TOKENS``); without tokens it answers only loopback ``Host`` names and those of ``--allow-host``
(see :mod:`graphckpt.server.guard`). Its connection bounds are :mod:`graphckpt.server.limits`'s. On SIGTERM or
Ctrl-C it stops accepting connections, ends the open streams, and exits within ``--graceful-timeout`` seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys

from graphckpt.prune import TTL_SWEEP_EVERY
from graphckpt.targets import Database, UsageError, compile_with, load_target

__all__ = ["LOOPBACK", "add_parser", "cmd_serve"]

LOOPBACK = frozenset({"127.0.0.1", "::1", "localhost"})


def add_parser(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "serve",
        help="serve graphs over HTTP (LangGraph-compatible API, SSE streams)",
        description="Serve the graphs MODULE:ATTR (graph id: MODULE:ATTR, or NAME with NAME=MODULE:ATTR) over an "
        "HTTP API that the langgraph-sdk client understands, with SSE streams that resume by Last-Event-ID. "
        "Binds 127.0.0.1 unless tokens are configured. Needs: pip install 'graphckpt[server]'.",
        parents=[common],
    )
    p.add_argument("targets", nargs="+", metavar="MODULE:ATTR", help="graphs to serve (the first is the default)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8123, help="port (default 8123; 0 picks a free one)")
    p.add_argument("--tokens-file", metavar="FILE", help="bearer tokens: one 'TOKEN NAMESPACE' per line")
    p.add_argument(
        "--tokens-env",
        metavar="NAME",
        default="GRAPHCKPT_TOKENS",
        help="environment variable with TOKEN=NAMESPACE pairs (default GRAPHCKPT_TOKENS)",
    )
    p.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="also answer requests whose Host header is NAME (loopback names always are; repeatable)",
    )
    p.add_argument(
        "--webhook-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a host a run's webhook may call (none by default: a run with a webhook is refused; repeatable)",
    )
    p.add_argument("--cors-origin", action="append", default=[], metavar="ORIGIN", help="allow CORS from ORIGIN")
    p.add_argument("--graceful-timeout", type=float, default=5.0, metavar="S", help="shutdown wait (default 5 s)")
    p.add_argument("--max-body", type=int, default=1 << 20, metavar="BYTES", help="largest request body")
    p.add_argument(
        "--max-connections",
        type=int,
        default=2000,
        metavar="N",
        help="connections served at once (default 2000; beyond, 503)",
    )
    p.add_argument(
        "--head-timeout",
        type=float,
        default=10.0,
        metavar="S",
        help="close a connection whose request has not arrived within S seconds (default 10)",
    )
    p.add_argument(
        "--stall-timeout",
        type=float,
        default=30.0,
        metavar="S",
        help="drop a stream client that has not read for S seconds (default 30; it reconnects by Last-Event-ID)",
    )
    p.add_argument(
        "--queue-limit",
        type=int,
        default=100,
        metavar="N",
        help="runs one namespace may have queued or running at once (default 100; beyond, 429)",
    )
    p.add_argument(
        "--no-recover",
        dest="recover",
        action="store_false",
        help="(a store without a run queue) do not take over the threads a crash left behind",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="in-process workers running the queued runs (default 1; each up to 8 at a time)",
    )
    p.add_argument(
        "--ttl-sweep-every",
        type=float,
        default=TTL_SWEEP_EVERY,
        metavar="SECONDS",
        help=f"remove threads whose TTL ran out every SECONDS (default {TTL_SWEEP_EVERY:g}; 0: never)",
    )
    p.add_argument(
        "--no-workers",
        dest="workers",
        action="store_const",
        const=0,
        help="execute no run here: separate 'graphckpt worker' processes on the same --db do",
    )


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from graphckpt.server import Tokens, create_app
        from graphckpt.server.limits import uvicorn_config
    except ImportError:
        sys.stderr.write("graphckpt: error: serve needs: pip install 'graphckpt[server]'\n")
        return 1
    try:
        tokens = Tokens.load(args.tokens_file, args.tokens_env)
    except (OSError, ValueError) as exc:
        raise UsageError(f"tokens: {exc}") from None
    if args.host not in LOOPBACK and not tokens:
        raise UsageError(
            f"refusing to bind {args.host!r} without tokens: anyone who can reach it could read and run every thread "
            "(give --tokens-file FILE or $GRAPHCKPT_TOKENS, or bind 127.0.0.1)"
        )
    if args.workers < 0:
        raise UsageError(f"--workers must be 0 or more, not {args.workers}")
    if not 0 <= args.ttl_sweep_every < float("inf"):
        raise UsageError(f"--ttl-sweep-every must be 0 or more seconds, not {args.ttl_sweep_every}")
    db = Database(getattr(args, "db", None))
    saver = db.saver(create=True)
    apps = {}
    for target in args.targets:
        name, sep, spec = target.partition("=")
        if not sep:
            name, spec = target, target
        apps[name] = compile_with(load_target(spec), saver)
        apps[name].graph_ref = spec  # a thread `graphckpt run MODULE:ATTR` made is this graph's (an alias)
    app = create_app(
        apps,
        saver,
        tokens=tokens,
        cors_origins=args.cors_origin,
        allowed_hosts=args.allow_host,
        max_body=args.max_body,
        stall_timeout=args.stall_timeout,
        queue_limit=args.queue_limit,
        recover=args.recover,
        workers=args.workers,
        webhook_hosts=args.webhook_host,
        ttl_sweep_every=args.ttl_sweep_every or None,
    )
    config = uvicorn_config(
        app,
        args.host,
        args.port,
        graceful_timeout=args.graceful_timeout,
        max_connections=args.max_connections,
        head_timeout=args.head_timeout,
    )
    hub = app.state.service.hub

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: object) -> None:
            """SIGTERM / Ctrl-C: end every open stream now (each sends its last bytes and closes), then let uvicorn
            stop accepting and wait for the connections to finish."""
            with contextlib.suppress(RuntimeError):  # the loop is gone already
                asyncio.get_event_loop().call_soon_threadsafe(hub.close)
            super().handle_exit(sig, frame)  # type: ignore[arg-type]

    server = Server(config)
    sys.stderr.write(f"graphckpt: serving {', '.join(apps)} from {db.display} on http://{args.host}:{args.port}\n")
    sys.stderr.flush()
    server.run()
    return 0
