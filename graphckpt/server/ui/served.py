"""The UI inside ``graphckpt serve``: :class:`ServiceBackend`, the :class:`~graphckpt.server.ui.data.UIBackend` over
the server's :class:`~graphckpt.server.service.Service`, and the UI's session (who the browser is).

One process, one saver: reading goes through a :class:`~graphckpt.reader.RawReader` over the service's saver;
running goes through the service's run executor (the same queue the JSON API's runs use, so a run started from the
UI can be cancelled from the UI or the API, and its events are in the thread's durable stream).

Namespaces. A backend is made per request for the caller's namespace (:func:`namespace_of`): it lists only that
namespace's threads, and any other thread is :class:`~graphckpt.errors.ThreadNotFoundError` (404), as in the JSON
API. The UI shows stored thread ids (``NAMESPACE/ID`` for a token's namespace; plain ids without tokens).

Session. A browser cannot send a bearer header with a link, so with tokens configured the UI has a login form: the
token is checked, and the browser gets the cookie ``graphckpt_session`` (``HttpOnly``, ``SameSite=Strict``) holding
a random session id that this process maps to the token (:class:`Sessions`), never the token nor anything derived
from it; it is valid only for the UI's pages. Signing out forgets the id (a copy of the cookie is worthless after);
a server restart ends every session. An ``Authorization: Bearer`` header works too.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hmac
import secrets
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from graphckpt.checkpoint import ThreadInfo
from graphckpt.diff import Diff
from graphckpt.errors import ThreadNotFoundError
from graphckpt.records import NO_ANSWER
from graphckpt.server.auth import Tokens
from graphckpt.server.errors import ApiError
from graphckpt.server.records import PendingThread, RunInfo, RunRequest
from graphckpt.server.ui.data import CheckpointPage, LocalBackend, StepRow, ThreadView

if TYPE_CHECKING:
    from starlette.requests import HTTPConnection

    from graphckpt.app import App
    from graphckpt.server.service import Service

__all__ = ["SESSION", "LoginRequired", "ServiceBackend", "Sessions", "namespace_of"]

SESSION = "graphckpt_session"
"""The UI's session cookie (a random id this process maps to the caller's token)."""

CLAIM_WAIT = 5.0
"""How long a resume or an answer waits (at most) for its run to claim the thread; the run is never awaited."""


class LoginRequired(Exception):
    """The request has no valid session or bearer token (the UI answers with its login form)."""


class Sessions:
    """Session id -> token, for the signed-in browsers of this process (at most :attr:`LIMIT`: the oldest sign-in is
    forgotten first)."""

    LIMIT = 10_000

    def __init__(self) -> None:
        self.tokens: dict[str, str] = {}

    def open(self, token: str) -> str:
        session = secrets.token_urlsafe(32)
        self.tokens[session] = token
        while len(self.tokens) > self.LIMIT:
            del self.tokens[next(iter(self.tokens))]
        return session

    def token(self, session: str) -> str | None:
        return self.tokens.get(session) if session else None

    def close(self, session: str) -> None:
        self.tokens.pop(session, None)


def sessions_of(conn: HTTPConnection) -> Sessions:
    """The sessions of the app serving ``conn`` (made at its first sign-in)."""
    state = conn.app.state
    if not hasattr(state, "ui_sessions"):
        state.ui_sessions = Sessions()
    found: Sessions = state.ui_sessions
    return found


def namespace_of(tokens: Tokens, conn: HTTPConnection) -> str:
    """The caller's namespace: ``""`` without tokens; else its bearer header's or its session's."""
    if not tokens:
        return ""
    if conn.headers.get("authorization"):
        try:
            return tokens.namespace(conn)
        except ApiError:
            raise LoginRequired from None
    token = sessions_of(conn).token(conn.cookies.get(SESSION, ""))
    namespace = token_namespace(tokens, token) if token is not None else None
    if namespace is None:
        raise LoginRequired
    return namespace


def token_namespace(tokens: Tokens, token: str) -> str | None:
    """The namespace of ``token``, or ``None`` when it is not a configured token."""
    for known, namespace in tokens.namespaces.items():
        if hmac.compare_digest(known.encode(), token.strip().encode()):
            return namespace
    return None


class ServiceBackend(LocalBackend):
    """The UI's backend for namespace ``ns`` over ``service`` (reads through its saver, runs through its queue)."""

    def __init__(self, service: Service, ns: str) -> None:
        super().__init__(service.saver, {}, default_graph=None)
        self.service = service
        self.ns = ns
        self.apps = service.graphs.by_ref()  # a thread the CLI made for a NAME=MODULE:ATTR graph is runnable
        self.default_graph = service.graphs.default

    async def _app_for(self, thread_id: str, action: str) -> tuple[App, dict[str, Any]]:
        """As :meth:`LocalBackend._app_for`; under a token, the tags also name the namespace that acted
        (``ui_by``; for an answer also ``user``, which the audit record's answer keeps as ``by``)."""
        app, tags = await super()._app_for(thread_id, action)
        if not self.ns:
            return app, tags
        return app, {**tags, "ui_by": self.ns, **({"user": self.ns} if action == "answer" else {})}

    # -- the namespace -----------------------------------------------------------------------------------------------

    def _mine(self, thread_id: str) -> bool:
        return not self.ns or thread_id.startswith(self.ns + "/")

    def _check(self, thread_id: str) -> None:
        if not self._mine(thread_id):
            raise ThreadNotFoundError(f"no thread {thread_id!r}")

    async def _infos(self, status: str | None = None) -> list[ThreadInfo]:
        """Only this namespace's threads: the list, the inbox, the fork tree and the diff choices read these."""
        return [i for i in await super()._infos(status) if self._mine(i.thread_id)]

    async def thread_view(self, thread_id: str) -> ThreadView:
        self._check(thread_id)
        return await super().thread_view(thread_id)

    async def created_thread(self, thread_id: str) -> Mapping[str, Any] | None:
        """The thread ``POST /threads`` created that has no checkpoint yet: its graph, metadata and creation time."""
        self._check(thread_id)
        found = await self.service.find("", thread_id)  # the UI names stored ids
        if isinstance(found, PendingThread):
            created = dt.datetime.fromtimestamp(found.created_at, dt.UTC)
            return {"thread_id": thread_id, "graph": found.graph_id, "metadata": found.metadata, "created": created}
        return None

    async def checkpoint_page(self, thread_id: str, checkpoint_id: str) -> CheckpointPage:
        self._check(thread_id)
        return await super().checkpoint_page(thread_id, checkpoint_id)

    async def checkpoints_of(self, thread_id: str) -> list[StepRow]:
        self._check(thread_id)
        return await super().checkpoints_of(thread_id)

    async def diff(self, a: tuple[str, str | None], b: tuple[str, str | None]) -> Diff:
        self._check(a[0])
        self._check(b[0])
        return await super().diff(a, b)

    # -- running: through the service's queue -------------------------------------------------------------------------

    def _cancellable(self, thread_id: str, status: str) -> bool:
        return self.service.runs.active(thread_id)

    def _stopped(self, thread_id: str, status: str, head_metadata: Mapping[str, Any] | None) -> bool:
        """Running, no run here, and its head is the record of a cancel (without leases, a thread run by another
        process looks the same as a crashed one: only a cancel is known for sure)."""
        tags = (head_metadata or {}).get("tags")
        cancelled = isinstance(tags, Mapping) and tags.get("ui_action") == "cancel"
        return status == "running" and cancelled and not self.service.runs.active(thread_id)

    def _owner(self, thread_id: str, record: Any) -> str | None:
        if self.service.runs.active(thread_id) and getattr(record, "status", None) == "running":
            return "this server"
        return super()._owner(thread_id, record)

    async def _submit(self, thread_id: str, action: str, answer: Any = NO_ANSWER) -> RunInfo:
        _, tags = await self._app_for(thread_id, action)
        record = await self.service.saver.get_thread(thread_id)
        if record is None:
            raise ThreadNotFoundError(f"no thread {thread_id!r}")
        graph = self.service.graphs.graph_of(record)
        start = await self.service.log.cursor_now(await self.service.segments_of("", record), record.head_step)
        request = RunRequest(thread_id, graph, resume=True, answer=answer, tags=tags)
        return await self.service.runs.submit(
            request, thread=record, multitask="enqueue", start=start, metadata={"via": "ui"}
        )

    async def fork_and_run(
        self, thread_id: str, checkpoint_id: str, update: Mapping[str, Any], new_thread_id: str | None
    ) -> str:
        self._check(thread_id)
        if new_thread_id is not None and self.ns and not new_thread_id.startswith(self.ns + "/"):
            new_thread_id = f"{self.ns}/{new_thread_id}"
        app, tags = await self._app_for(thread_id, "fork")
        snap = await app.afork(thread_id, checkpoint_id, update=update or None, new_thread_id=new_thread_id, tags=tags)
        await self._submit(snap.thread_id, "fork")  # queued: the new branch's page (running, unclaimed) follows it
        return snap.thread_id

    async def _resume(self, thread_id: str, action: str) -> None:
        self._check(thread_id)
        before = await self.reader.athread(thread_id)
        run = await self._submit(thread_id, action)
        await self._claimed(thread_id, before, run)

    async def answer(self, thread_id: str, interrupt_id: str, answer: Any) -> None:
        self._check(thread_id)
        head = await self.reader.aget_state(thread_id)
        ids = [i.id for i in head.interrupts]
        if interrupt_id not in ids:
            from graphckpt.server.ui.data import UIError

            raise UIError(
                f"thread {thread_id!r} has no open interrupt {interrupt_id!r} (open: {', '.join(ids) or 'none'})"
            )
        value = answer if answer is NO_ANSWER or len(ids) == 1 else {interrupt_id: answer}
        before = await self.reader.athread(thread_id)
        await self._claimed(thread_id, before, await self._submit(thread_id, "answer", value))

    async def cancel(self, thread_id: str) -> None:
        """Cancel the thread's runs in this server, then record the cancel in the thread's record: a checkpoint of
        source ``update`` (values unchanged) tagged ``{"via": "ui", "ui_action": "cancel"}``."""
        self._check(thread_id)
        app, tags = await self._app_for(thread_id, "cancel")
        await self.service.runs.cancel_thread(thread_id)
        await app.aupdate_state(thread_id, None, tags=tags)

    async def aclose(self) -> None:  # the service owns the saver
        return None

    async def _claimed(self, thread_id: str, before: ThreadInfo, run: RunInfo) -> None:
        """Wait (at most :data:`CLAIM_WAIT`) until ``run`` claimed the thread or ended: the page shown next then
        follows it live (a thread still ``interrupted`` would not)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CLAIM_WAIT
        while not run.done.is_set() and loop.time() < deadline:
            now = await self.reader.athread(thread_id)
            if now.status != before.status or now.head != before.head:
                return
            ended = await self.service.runs.get(run.run_id)  # a queue's run info is a snapshot: read it back
            if ended is not None and ended.finished:
                return
            await asyncio.sleep(0.01)


# -- the routes only the server has: login, the live stream of a thread ------------------------------------------------

LIVE_KINDS = frozenset({"checkpoint", "interrupt", "run.done", "run.failed", "run.interrupted"})
"""The durable events after which a thread's page refreshes its live part."""

UI_MODES = frozenset({"messages"})
"""The ephemeral stream modes a page may add to a thread's live stream (``?modes=messages``: the conversation view's
token streaming)."""

RETRY_MS = 500
"""How soon a browser reconnects its live stream after the server went away (it resends ``Last-Event-ID``)."""


def server_routes(tokens: Tokens) -> list[Any]:
    """``GET/POST /login`` (the token form; with no tokens configured it just goes home) and
    ``GET /events/{thread}`` (the thread's durable events, as the JSON API's stream, for the page's live part)."""
    from starlette.routing import Route

    return [
        Route("/login", _login(tokens), methods=["GET", "POST"], name="ui_login"),
        Route("/logout", _logout, methods=["POST"], name="ui_logout"),
        Route("/events/{thread_id:path}", _events(tokens), methods=["GET"], name="ui_events"),
    ]


def _login(tokens: Tokens) -> Any:
    from starlette.requests import Request
    from starlette.responses import RedirectResponse, Response

    from graphckpt.server.ui import csrf
    from graphckpt.server.ui.routes import read_form, render_page

    async def login(request: Request) -> Response:
        base = request.scope.get("root_path", "")
        target = request.query_params.get("next", "")
        if not target.startswith(base + "/") or target.startswith("//"):
            target = base + "/"
        if not tokens:
            return RedirectResponse(target, status_code=303)
        if request.method == "GET":
            return render_page(request, "login.html", {"next": target, "error": None}, 401)
        form = await read_form(request)
        if not csrf.check(request, form):
            return render_page(request, "login.html", {"next": target, "error": "the form expired: retry"}, 403)
        token = form.get("token", "")
        if token_namespace(tokens, token) is None:
            return render_page(request, "login.html", {"next": target, "error": "that token is not valid"}, 401)
        response = RedirectResponse(target, status_code=303)
        session = sessions_of(request).open(token)
        response.set_cookie(SESSION, session, httponly=True, samesite="strict", path=base or "/")
        return response

    return login


async def _logout(request: Any) -> Any:
    """End the browser's session (a POST with the CSRF token, like every action)."""
    from starlette.responses import RedirectResponse

    from graphckpt.server.ui import csrf
    from graphckpt.server.ui.routes import forbidden, read_form

    if not csrf.check(request, await read_form(request)):
        return forbidden(request)
    sessions_of(request).close(request.cookies.get(SESSION, ""))
    base = request.scope.get("root_path", "")
    response = RedirectResponse(base + "/login", status_code=303)
    response.delete_cookie(SESSION, path=base or "/", httponly=True, samesite="strict")
    return response


def _events(tokens: Tokens) -> Any:
    from sse_starlette import ServerSentEvent
    from starlette.requests import Request

    from graphckpt.server.events.streams import HEADERS, SHUTDOWN_GRACE, StreamResponse, event_source
    from graphckpt.server.routes.streams import start_of

    async def events(request: Request) -> StreamResponse:
        ns = namespace_of(tokens, request)
        service = request.app.state.service
        thread_id = request.path_params["thread_id"]
        if ns and not thread_id.startswith(ns + "/"):
            raise ThreadNotFoundError(f"no thread {thread_id!r}")
        last_id = request.headers.get("last-event-id") or request.query_params.get("after") or None
        # the UI names stored ids: read in the root namespace, after the namespace check above
        record = await service.saver.get_thread(thread_id)
        if record is None:
            raise ThreadNotFoundError(f"no thread {thread_id!r}")
        modes = frozenset(m for m in request.query_params.get("modes", "").split(",") if m)
        if not modes <= UI_MODES:
            raise ApiError(
                422,
                "ValidationError",
                f"query field 'modes': the UI's stream offers {sorted(UI_MODES)}, not {sorted(modes)}",
            )
        segments = await service.segments_of("", record)
        now = await service.log.cursor_now(segments, record.head_step)  # the page shows what came before
        start = await start_of(service, "", thread_id, last_id, default=now, ephemeral=bool(modes), segments=segments)
        first = [ServerSentEvent(retry=RETRY_MS, comment="live")]
        if start.reset is not None:
            first.append(ServerSentEvent(event="stream.reset", data="{}"))
        source = event_source(
            service.feed,
            "",
            thread_id,
            start.segments,
            start.cursor,
            last_kind=start.kind,
            kinds=set(LIVE_KINDS),
            modes=modes,
            after_n=start.after_n,
            preamble=first,
        )
        keepalive = request.app.state.config.keepalive
        stall = request.app.state.config.stall_timeout
        return StreamResponse(
            source, headers=HEADERS, ping=keepalive, shutdown_grace_period=SHUTDOWN_GRACE, send_timeout=stall
        )

    return events
