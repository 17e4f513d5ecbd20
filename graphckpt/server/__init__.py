"""``graphckpt serve``: an HTTP API over graphckpt threads, with SSE streams replayed from the durable event log,
and the web UI.

Needs the ``server`` extra (``pip install 'graphckpt[server]'``: Starlette, sse-starlette, uvicorn). Imports run one
way, top to bottom:

- :mod:`.app`: :func:`create_app`, the composition (graphs, hub, executor, service), the routes list, the lifespan;
- :mod:`.routes`: one module of small handlers per resource group (assistants, threads, runs, streams);
  :mod:`.openapi`: ``/openapi.json``; :mod:`.ui`: the web UI at ``/ui/`` (server-rendered pages over the same
  service, tokens and namespaces);
- :mod:`.service`: what the handlers call (namespaced thread operations); :mod:`.queries`: JSON views of the results;
- :mod:`.execution`: the run executor interface and its two implementations, in process and over the durable run
  queue (with in-process workers by default, or separate ``graphckpt worker`` processes);
- :mod:`.events`: the hub that wakes the streams, the ephemeral events, the log reads, the stream modes, the SSE
  stream over the event log (a cursor, nothing else);
- :mod:`.graphs`: the served graphs by id; :mod:`.records`: pending threads and a thread's metadata;
- :mod:`.models`: request models and body limits; :mod:`.auth`: tokens and namespaces; :mod:`.errors`: the one
  error-to-HTTP mapping; :mod:`.http`: what every handler shares.
"""

from __future__ import annotations

from graphckpt.server.app import create_app
from graphckpt.server.auth import Tokens

__all__ = ["Tokens", "create_app"]
