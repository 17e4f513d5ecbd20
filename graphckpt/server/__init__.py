"""``graphckpt serve``: an HTTP API over graphckpt threads, with SSE streams replayed from the durable event log,
and the web UI.

Needs the ``server`` extra (``pip install 'graphckpt[server]'``: Starlette, sse-starlette, uvicorn). Modules:

- :mod:`.app`: :func:`create_app`, the routes list and the lifespan;
- :mod:`.assistants`, :mod:`.threads`, :mod:`.runs`: one module of handlers per resource group;
- :mod:`.streams`: the SSE generator over the event log (a cursor, nothing else); :mod:`.hub`: its wake-ups;
- :mod:`.service`: what the handlers call (namespaced thread operations); :mod:`.queries`: JSON views of the
  results (both reusable by a web UI); :mod:`.executor`: the run executor interface; :mod:`.queue_runs`: the one
  over the durable run queue, with in-process workers by default (or separate ``graphckpt worker`` processes);
- :mod:`.ui`: the web UI at ``/ui/`` (server-rendered pages over the same service, tokens and namespaces);
- :mod:`.models`: request models and body limits; :mod:`.auth`: tokens and namespaces; :mod:`.errors`: the one
  error-to-HTTP mapping; :mod:`.openapi`: ``/openapi.json``.
"""

from __future__ import annotations

from graphckpt.server.app import create_app
from graphckpt.server.auth import Tokens

__all__ = ["Tokens", "create_app"]
