"""graphckpt's web UI: threads, a thread's timeline, graph and fork tree, checkpoints, diffs, the interrupts inbox.

Server-rendered HTML (Jinja2 templates in ``templates/``), htmx vendored in ``static/`` (pinned; its checksum is
checked by ``tests/ui/test_ui_assets.py``), no CDN, no build step. Every page reads without JavaScript (links and
forms); htmx only refreshes a running thread's page. Modules:

- :mod:`~graphckpt.server.ui.data`: what the UI reads and does (:class:`UIBackend`, :class:`LocalBackend`);
- :mod:`~graphckpt.server.ui.routes`: the handlers (parse, call the backend, render) and their paths;
- :mod:`~graphckpt.server.ui.graphsvg`: the compiled graph as inline SVG;
- :mod:`~graphckpt.server.ui.csrf`: the double-submit cookie every POST needs.

- :mod:`~graphckpt.server.ui.served`: the UI inside ``graphckpt serve`` (:class:`ServiceBackend`, login, the live
  stream).

Mounting. The UI lives under a prefix (``/ui``: the JSON API owns ``/threads``). ``graphckpt serve`` mounts it on
its :class:`~graphckpt.server.service.Service` (see :func:`graphckpt.server.create_app`); any other backend::

    Mount("/ui", routes=ui_routes(lambda request: backend))

or stand-alone, :func:`create_ui_app` (``python -m graphckpt.server.ui graphckpt.db`` serves a database).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import TYPE_CHECKING

from graphckpt.server.ui.data import LocalBackend, UIBackend, UIError
from graphckpt.server.ui.routes import ui_routes

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from graphckpt.app import App
    from graphckpt.savers.base import Saver

__all__ = ["LocalBackend", "UIBackend", "UIError", "create_ui_app", "ui_routes"]

PREFIX = "/ui"


def create_ui_app(
    saver: Saver,
    apps: Mapping[str, App] | None = None,
    *,
    default_graph: str | None = None,
    prefix: str = PREFIX,
    allowed_hosts: Iterable[str] = (),
) -> Starlette:
    """A Starlette app serving the UI over ``saver`` at ``prefix`` (``/`` redirects there), behind the server's
    front door (:class:`~graphckpt.server.guard.Guard`): it answers a ``Host`` that is a loopback name or one of
    ``allowed_hosts`` only (a DNS-rebinding page reads nothing), refuses a write whose ``Origin`` is another site's,
    and its forms carry CSRF tokens, as under ``graphckpt serve``.

    ``apps`` maps graph ids (the ``MODULE:ATTR`` threads record in ``tags.graph``) to the apps that run them: the UI
    forks, resumes and answers only threads whose graph is among them; ``default_graph`` is the one for threads
    that record none. The saver is closed when the app shuts down."""
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.responses import RedirectResponse
    from starlette.routing import Mount, Route

    from graphckpt.server.guard import Guard

    backend = LocalBackend(saver, apps, default_graph=default_graph)

    async def home(request: object) -> RedirectResponse:
        return RedirectResponse(prefix + "/", status_code=307)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await backend.aclose()

    routes = [Route("/", home), Mount(prefix, routes=ui_routes(lambda request: backend))]
    guard = Middleware(Guard, check_host=True, allowed_hosts=tuple(allowed_hosts), ui_prefix=prefix)
    return Starlette(routes=routes, lifespan=lifespan, middleware=[guard])
