"""``create_app``: the ASGI application (Starlette) of ``graphckpt serve``, to mount under any ASGI server.

This is the composition: the served graphs (:class:`~graphckpt.server.graphs.Graphs`), the event hub, the run
executor chosen for the saver (:mod:`~graphckpt.server.execution`: the durable run queue's, or in process), and the
:class:`~graphckpt.server.service.Service` over them, which starts and stops with the app's lifespan. The routes are
a plain list, one module per resource group under :mod:`graphckpt.server.routes` (assistants, threads, runs, with the
SSE streams of :mod:`graphckpt.server.events`; the Agent Protocol's agents, runs and thread streams). Errors cross the
boundary in :mod:`~graphckpt.server.errors`.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route

from graphckpt.app import App
from graphckpt.errors import GraphckptError
from graphckpt.prune import TTL_SWEEP_EVERY
from graphckpt.savers.base import Saver
from graphckpt.savers.queue import RunQueue
from graphckpt.server import openapi
from graphckpt.server.auth import Tokens
from graphckpt.server.errors import ApiError, handle_error, handle_http
from graphckpt.server.events.hub import Hub
from graphckpt.server.execution.base import RunExecutor
from graphckpt.server.execution.inline import InProcessRuns
from graphckpt.server.execution.queued import QueueRuns
from graphckpt.server.graphs import Graphs
from graphckpt.server.guard import Guard
from graphckpt.server.http import Config
from graphckpt.server.routes import (
    agents,
    ap_runs,
    ap_threads,
    assistants,
    crons,
    runs,
    stateless,
    store,
    thread_ops,
    thread_stream,
    threads,
)
from graphckpt.server.service import Service

if TYPE_CHECKING:
    from graphckpt.graph import StateGraph

__all__ = ["build_service", "create_app"]


def create_app(
    graphs: App | StateGraph | Mapping[str, App | StateGraph],
    saver: Saver | None = None,
    *,
    db: str | None = None,
    tokens: Tokens | None = None,
    cors_origins: Sequence[str] = (),
    allowed_hosts: Sequence[str] = (),
    max_body: int = 1 << 20,
    keepalive: float = 15.0,
    stall_timeout: float = 30.0,
    queue_limit: int = 100,
    poll_interval: float = 0.01,
    recover: bool = True,
    workers: int = 1,
    ui: bool = True,
    webhook_hosts: Sequence[str] = (),
    ttl_sweep_every: float | None = TTL_SWEEP_EVERY,
) -> Starlette:
    """The server for ``graphs`` (one graph, or graph id -> graph; a :class:`StateGraph` is compiled) on ``saver``
    (or the database URL ``db``; by default the first app's saver). ``tokens`` scope requests to namespaces (none:
    no authentication). CORS is off unless ``cors_origins`` lists origins. Every request passes the
    :class:`~graphckpt.server.guard.Guard` first: without tokens (or when ``allowed_hosts`` names any) a ``Host``
    other than a loopback name or one of ``allowed_hosts`` is refused; a write needs JSON and a same-origin
    ``Origin``. Runs are queued and executed by
    ``workers`` in-process :class:`~graphckpt.Worker` s (``0``: by separate ``graphckpt worker`` processes on the
    same database; see :mod:`graphckpt.server.execution.queued`). ``recover`` only matters for a saver without a
    run queue (see :class:`~graphckpt.server.execution.inline.InProcessRuns`). ``ui``: serve the web UI at ``/ui/``
    (a browser asking for ``/`` is sent there), over the same service, tokens and namespaces. ``stall_timeout``: a
    stream client that has not read for that long is dropped; ``queue_limit``: runs one namespace may have queued or
    running at once (429 beyond); ``webhook_hosts``: the hosts a run's ``webhook`` may call (none by default).
    ``ttl_sweep_every``: how often (seconds) expired threads are removed, by the in-process workers (or this process,
    without a run queue); ``None``: never."""
    apps = _apps(graphs)
    if saver is None:
        saver = _saver(db) if db is not None else next(iter(apps.values())).saver
    service = build_service(
        apps, saver, poll_interval=poll_interval, recover=recover, workers=workers, ttl_sweep_every=ttl_sweep_every
    )
    config = Config(
        tokens or Tokens(),
        max_body=max_body,
        keepalive=keepalive,
        stall_timeout=stall_timeout,
        queue_limit=queue_limit,
        webhook_hosts=frozenset(h.lower() for h in webhook_hosts),
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await service.start()
        try:
            yield
        finally:
            await service.stop()

    async def openapi_json(request: Request) -> Response:
        return JSONResponse(openapi.document(bool(config.tokens)))

    check_host = not config.tokens or bool(allowed_hosts)
    guard = Middleware(Guard, check_host=check_host, allowed_hosts=allowed_hosts, cors_origins=cors_origins)
    middleware = [guard]
    if cors_origins:
        from starlette.middleware.cors import CORSMiddleware

        middleware.append(
            Middleware(
                CORSMiddleware,
                allow_origins=list(cors_origins),
                allow_methods=["*"],
                allow_headers=["*"],
                expose_headers=["Content-Location", "Location"],
            )
        )
    routes: list[BaseRoute] = [
        *assistants.routes,
        *thread_ops.routes,
        *threads.routes,
        *runs.routes,
        *stateless.routes,
        Route("/openapi.json", openapi_json),
    ]
    routes += [*store.routes, *crons.routes]  # wave3 issue 29
    # wave3 issue 28: the Agent Protocol, then the sdk's v3 thread stream (its events route; the commands route is
    # the protocol's, which takes the v3 stream's commands too)
    routes += [*thread_stream.routes, *agents.routes, *ap_runs.routes, *ap_threads.routes]
    handlers: dict[Any, Any] = {}
    if ui:
        routes.extend(_ui_routes(config.tokens))
        from graphckpt.server.ui.served import LoginRequired

        handlers[LoginRequired] = _login_required
    app = Starlette(
        routes=routes,
        middleware=middleware,
        exception_handlers={
            ApiError: handle_error,
            GraphckptError: handle_error,
            HTTPException: handle_http,
            **handlers,
            Exception: handle_error,  # last resort (Starlette re-raises it after the 500 is sent: it is logged)
        },
        lifespan=lifespan,
    )
    app.state.service = service
    app.state.config = config
    return app


def build_service(
    apps: Mapping[str, App],
    saver: Saver,
    *,
    poll_interval: float = 0.01,
    recover: bool = True,
    workers: int = 1,
    ttl_sweep_every: float | None = TTL_SWEEP_EVERY,
) -> Service:
    """The service of ``apps`` on ``saver``: its runs go through the saver's durable run queue (executed by
    ``workers`` in-process workers) when it has one, else run in this process (``recover``: take over crashed
    threads)."""
    graphs = Graphs(apps, saver)
    hub = Hub(saver, poll_interval=poll_interval)
    executor: RunExecutor
    if isinstance(saver, RunQueue):  # runs are rows of the durable queue, executed by workers
        executor = QueueRuns(graphs, hub.ephemera, workers=workers, ttl_sweep_every=ttl_sweep_every)
    else:
        executor = InProcessRuns(graphs, recover=recover, ttl_sweep_every=ttl_sweep_every)
    return Service(graphs, hub, executor)


def _ui_routes(tokens: Tokens) -> list[BaseRoute]:
    """``/ui/...`` (the UI, on a :class:`~graphckpt.server.ui.served.ServiceBackend` per request, for the caller's
    namespace) and ``GET /`` (a browser is sent to ``/ui/``; any other client gets the JSON 404 as before)."""
    from graphckpt.server.ui.routes import ui_routes
    from graphckpt.server.ui.served import ServiceBackend, namespace_of, server_routes

    def backend_of(request: Request) -> ServiceBackend:
        return ServiceBackend(request.app.state.service, namespace_of(tokens, request))

    async def home(request: Request) -> Response:
        if "text/html" in request.headers.get("accept", ""):
            return RedirectResponse(request.scope.get("root_path", "") + "/ui/", status_code=307)
        raise HTTPException(404)

    ui = Mount("/ui", routes=[*server_routes(tokens), *ui_routes(backend_of, stream=True)])
    return [Route("/", home, include_in_schema=False), ui]


async def _login_required(request: Request, exc: Exception) -> Response:
    """A UI request without a session: a page goes to the login form, anything else is 401."""
    if request.method == "GET" and not request.url.path.startswith("/ui/events/"):
        where = request.scope.get("root_path", "") + "/login"  # raised inside the /ui mount: its root path
        return RedirectResponse(f"{where}?next={quote(request.url.path)}", status_code=303)
    return PlainTextResponse("sign in first: /ui/login", status_code=401)


def _apps(graphs: Any) -> dict[str, App]:
    """``graphs`` as id -> app: a single graph or app is ``"graph"``; a graph (anything with ``compile``) is
    compiled (the server sits above the builder and does not import it)."""
    if not isinstance(graphs, Mapping):
        graphs = {"graph": graphs}
    return {name: g if isinstance(g, App) else g.compile() for name, g in graphs.items()}


def _saver(url: str) -> Saver:
    from graphckpt.targets import Database

    return Database(url).saver(create=True)
