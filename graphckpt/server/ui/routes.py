"""The UI's HTTP handlers: parse the request, call one :class:`~graphckpt.server.ui.data.UIBackend` method, render.

Paths (relative to where the UI is mounted, ``/ui`` under ``graphckpt serve``):

==========================================  =====================================================================
``GET /``                                   threads: ``?status=&graph=&q=&after=`` (keyset pages)
``GET /threads/{thread}``                   a thread: timeline, graph, fork tree
``GET /threads/{thread}@{checkpoint}``      a checkpoint (the CLI's ``thread@checkpoint`` deep link)
``GET /fragments/live/{thread}``            the live part of a thread's page (what htmx polls while it runs)
``GET /diff?a=T@C&b=T@C``                   the diff of two checkpoints (a bare ``T`` is the head of ``T``)
``GET /interrupts``                         the inbox of open interrupts
``POST /actions/fork``                      fork from a checkpoint with edited fields, then run the branch
``POST /actions/resume``                    resume a thread (in the background)
``POST /actions/answer``                    answer an interrupt (the thread resumes)
``POST /actions/cancel``                    cancel a thread's run (``graphckpt serve`` only)
``GET /static/...``                         htmx and the stylesheet
==========================================  =====================================================================

Every POST needs the CSRF token (:mod:`~graphckpt.server.ui.csrf`) and answers ``303 See Other`` to the page that
shows the outcome, or the same page again with the error in place (status 422).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import quote, urlencode

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from graphckpt.errors import CheckpointNotFoundError, GraphckptError, ThreadNotFoundError
from graphckpt.records import NO_ANSWER
from graphckpt.server.ui import csrf
from graphckpt.server.ui.data import UIBackend, UIError
from graphckpt.server.ui.graphsvg import graph_svg
from graphckpt.server.ui.render import HERE, forbidden, line_diff, read_form, redirect, render_page, split_ref
from graphckpt.server.ui.workroutes import WORK_ROUTES

__all__ = ["HERE", "BackendOf", "forbidden", "read_form", "render_page", "ui_routes"]

BackendOf = Callable[[Request], UIBackend]
"""How a handler finds the backend for a request (the server's may depend on the caller's token)."""

PER_PAGE = 25
POLL = "every 1s"
"""How htmx refreshes a running thread's live fragment. When the server's SSE stream of a thread exists, this is the
one place to switch: ``hx-ext="sse" sse-connect=... hx-trigger="sse:checkpoint"`` (see templates/_live.html)."""


def _int(text: str | None, default: int, low: int, high: int) -> int:
    """A query parameter as an int in [low, high]; the default when it is missing or no number."""
    try:
        return min(max(int(text or default), low), high)
    except ValueError:
        return default


_line_diff = line_diff  # their names before render.py held them
_split_ref = split_ref


def ui_routes(backend_of: BackendOf, *, stream: bool = False) -> list[BaseRoute]:
    """The UI's routes, to mount where the UI lives (``Mount("/ui", routes=ui_routes(...))``). ``stream``: a running
    thread's page follows ``GET /events/{thread}`` (the server's SSE stream, see
    :mod:`~graphckpt.server.ui.served`) instead of polling."""

    def handler(fn: Callable[[Request, UIBackend], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            request.state.ui_stream = stream
            try:
                return await fn(request, backend_of(request))
            except (ThreadNotFoundError, CheckpointNotFoundError) as exc:
                return render_page(request, "error.html", {"title": "Not found", "message": str(exc)}, 404)
            except UIError as exc:
                return render_page(request, "error.html", {"title": "Cannot do that", "message": str(exc)}, 422)
            except GraphckptError as exc:
                return render_page(request, "error.html", {"title": type(exc).__name__, "message": str(exc)}, 409)

        endpoint.__name__ = fn.__name__
        return endpoint

    return [
        Route("/", handler(threads_page), methods=["GET"], name="ui_threads"),
        Route("/threads/{ref:path}", handler(thread_or_checkpoint), methods=["GET"], name="ui_thread"),
        Route("/fragments/live/{thread_id:path}", handler(live_fragment), methods=["GET"], name="ui_live"),
        Route("/diff", handler(diff_page), methods=["GET"], name="ui_diff"),
        Route("/interrupts", handler(inbox_page), methods=["GET"], name="ui_interrupts"),
        Route("/actions/fork", handler(fork_action), methods=["POST"], name="ui_fork"),
        Route("/actions/resume", handler(resume_action), methods=["POST"], name="ui_resume"),
        Route("/actions/answer", handler(answer_action), methods=["POST"], name="ui_answer"),
        Route("/actions/cancel", handler(cancel_action), methods=["POST"], name="ui_cancel"),
        *(Route(path, handler(fn), methods=[method], name=name) for path, fn, method, name in WORK_ROUTES),
        Mount("/static", app=StaticFiles(directory=str(HERE / "static")), name="ui_static"),
    ]


# -- pages -------------------------------------------------------------------------------------------------------------


async def threads_page(request: Request, backend: UIBackend) -> Response:
    q = request.query_params
    per = _int(q.get("per"), PER_PAGE, 1, 200)
    filters = {k: q.get(k, "") for k in ("status", "graph", "q")}
    page = await backend.thread_page(
        status=filters["status"] or None,
        graph=filters["graph"] or None,
        q=filters["q"] or None,
        after=q.get("after") or None,
        per_page=per,
    )
    kept = {k: v for k, v in filters.items() if v} | ({"per": str(per)} if per != PER_PAGE else {})
    first_url = "?" + urlencode(kept) if kept else "?"
    next_url = "?" + urlencode({**kept, "after": page.next}) if page.next else None
    known = ["running", "crashed", "interrupted", "waiting", "failed", "done", "partial"]
    choices = known + [s for s in page.statuses if s not in known]
    ctx = {"page": page, "filters": filters, "first_url": first_url, "next_url": next_url, "status_choices": choices}
    return render_page(request, "threads.html", ctx)


async def thread_or_checkpoint(request: Request, backend: UIBackend) -> Response:
    thread_id, checkpoint_id = split_ref(request.path_params["ref"])
    if checkpoint_id is None:
        return await _thread(request, backend, thread_id)
    lineage = await backend.checkpoints_of(thread_id)
    if all(s.checkpoint_id != checkpoint_id for s in lineage):  # a short id, as the CLI prints and accepts them
        found = [s for s in lineage if s.checkpoint_id.startswith(checkpoint_id)]
        if len(found) == 1:
            return redirect(request, f"/threads/{quote(thread_id, safe='')}@{found[0].checkpoint_id}")
        if found:
            ctx = {"thread_id": thread_id, "spec": checkpoint_id, "matches": found}
            return render_page(request, "matches.html", ctx, 300)
    return await _checkpoint(request, backend, thread_id, checkpoint_id, {}, None)


async def _full_ref(backend: UIBackend, ref: str) -> str:
    """``thread@checkpoint`` with a unique checkpoint prefix completed (else as given: the diff names what is
    wrong)."""
    thread_id, checkpoint_id = split_ref(ref)
    if checkpoint_id is None:
        return ref
    found = [
        s.checkpoint_id for s in await backend.checkpoints_of(thread_id) if s.checkpoint_id.startswith(checkpoint_id)
    ]
    if checkpoint_id in found or len(found) != 1:
        if len(found) > 1 and checkpoint_id not in found:
            raise UIError(
                f"checkpoint prefix {checkpoint_id!r} is ambiguous in thread {thread_id!r} ({len(found)} match)"
            )
        return ref
    return f"{thread_id}@{found[0]}"


async def _live_context(request: Request, backend: UIBackend, thread_id: str) -> dict[str, Any]:
    view = await backend.thread_view(thread_id)
    last = view.steps[-1] if view.steps else None
    current = set(last.nodes) if last is not None else set()
    svg = None
    if view.graph is not None:
        failed = {e.node for e in view.head.errors}
        svg = graph_svg(view.graph, current=current, next=set(view.head.next), done=view.done_nodes, failed=failed)
    running = view.info.status == "running"
    # under the server a crashed thread is taken over by a worker's sweeper within a lease: keep following it
    streamed = (running or view.info.status == "crashed") and bool(request.state.ui_stream)
    return {
        "view": view,
        "svg": svg,
        "poll": POLL if running and not streamed else None,
        "running": running,
        "stream": f"/events/{quote(thread_id, safe='')}" if streamed else None,
    }


async def _thread(request: Request, backend: UIBackend, thread_id: str) -> Response:
    try:
        return render_page(request, "thread.html", await _live_context(request, backend, thread_id))
    except ThreadNotFoundError:
        created = await backend.created_thread(thread_id)  # POST /threads made it; its first run stores it
        if created is None:
            raise
        return render_page(request, "created.html", {"created": created})


async def live_fragment(request: Request, backend: UIBackend) -> Response:
    thread_id = request.path_params["thread_id"]
    try:
        return render_page(request, "_live.html", await _live_context(request, backend, thread_id))
    except ThreadNotFoundError:
        created = await backend.created_thread(thread_id)  # its run has not stored its first checkpoint yet
        if created is None:
            raise
        return render_page(request, "_created.html", {"created": created})


async def _checkpoint(
    request: Request,
    backend: UIBackend,
    thread_id: str,
    checkpoint_id: str,
    edited: Mapping[str, str],
    error: str | None,
) -> Response:
    page = await backend.checkpoint_page(thread_id, checkpoint_id)
    fields = []
    for name, value in page.values.items():
        text = value if isinstance(value, str) else json.dumps(value, indent=2, ensure_ascii=False)
        fields.append({"name": name, "is_text": isinstance(value, str), "value": edited.get(f"field.{name}", text)})
    choices = []
    for other in await backend.all_thread_ids():
        choices.append(other)
    lineage = await backend.checkpoints_of(thread_id)
    return render_page(
        request,
        "checkpoint.html",
        {
            "page": page,
            "thread_id": thread_id,
            "fields": fields,
            "error": error,
            "choices": choices,
            "lineage": lineage,
        },
        422 if error else 200,
    )


async def diff_page(request: Request, backend: UIBackend) -> Response:
    a, b = request.query_params.get("a", ""), request.query_params.get("b", "")
    if not a or not b:
        raise UIError("a diff needs two checkpoints: ?a=THREAD@CHECKPOINT&b=THREAD[@CHECKPOINT]")
    full_a, full_b = await _full_ref(backend, a), await _full_ref(backend, b)
    if (full_a, full_b) != (a, b):
        return redirect(request, "/diff?" + urlencode({"a": full_a, "b": full_b}))
    diff = await backend.diff(split_ref(a), split_ref(b))
    changes = [(c, line_diff(c.before, c.after)) for c in diff.changes()]
    return render_page(request, "diff.html", {"diff": diff, "changes": changes, "a": a, "b": b})


async def inbox_page(request: Request, backend: UIBackend) -> Response:
    return render_page(request, "interrupts.html", {"items": await backend.inbox(), "errors": {}, "answers": {}})


# -- actions -----------------------------------------------------------------------------------------------------------


async def fork_action(request: Request, backend: UIBackend) -> Response:
    form = await read_form(request)
    if not csrf.check(request, form):
        return forbidden(request)
    thread_id, checkpoint_id = form.get("thread", ""), form.get("checkpoint", "")
    page = await backend.checkpoint_page(thread_id, checkpoint_id)
    update: dict[str, Any] = {}
    problems = []
    for name, current in page.values.items():
        sent = form.get(f"field.{name}")
        if sent is None:
            continue
        if isinstance(current, str):
            value: Any = sent.replace("\r\n", "\n")
        else:
            try:
                value = json.loads(sent)
            except json.JSONDecodeError as exc:
                problems.append(f"field {name!r} is not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})")
                continue
        if value != current:
            update[name] = value
    if problems:
        return await _checkpoint(request, backend, thread_id, checkpoint_id, form, "; ".join(problems))
    new_id = form.get("new_thread_id", "").strip() or None
    try:
        made = await backend.fork_and_run(thread_id, checkpoint_id, update, new_id)
    except (UIError, GraphckptError) as exc:
        if isinstance(exc, ThreadNotFoundError | CheckpointNotFoundError):
            raise
        return await _checkpoint(request, backend, thread_id, checkpoint_id, form, str(exc))
    return redirect(request, f"/threads/{quote(made, safe='')}")


async def resume_action(request: Request, backend: UIBackend) -> Response:
    form = await read_form(request)
    if not csrf.check(request, form):
        return forbidden(request)
    thread_id = form.get("thread", "")
    await backend.resume(thread_id)
    return redirect(request, f"/threads/{quote(thread_id, safe='')}")


async def cancel_action(request: Request, backend: UIBackend) -> Response:
    form = await read_form(request)
    if not csrf.check(request, form):
        return forbidden(request)
    thread_id = form.get("thread", "")
    await backend.cancel(thread_id)
    return redirect(request, f"/threads/{quote(thread_id, safe='')}")


def _answer_of(form: Mapping[str, str]) -> Any:
    """The answer a form gives: continue (a stop before/after a node), the Approve/Reject button pressed (with its
    comment), the JSON text when filled in, the choice, the object of the payload's fields, else the text."""
    if form.get("continue"):
        return NO_ANSWER
    choice = form.get("approved")
    if choice in ("true", "false") and not form.get("as_json"):
        comment = form.get("comment", "").strip()
        answer: dict[str, Any] = {"approved": choice == "true"}
        if comment:
            answer["comment"] = comment
        return answer
    raw = form.get("json", "").strip()
    if raw:
        try:
            return json.loads(raw)
        except json.JSONDecodeError as exc:
            raise UIError(f"the answer is not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    if "choice" in form:
        return form["choice"]
    fields = {k.removeprefix("answer."): v for k, v in form.items() if k.startswith("answer.")}
    if fields:
        return _object_of(fields, form)
    if "text" in form and form["text"].strip():
        return form["text"]
    raise UIError("choose an answer (or write it as JSON)")


def _object_of(fields: Mapping[str, str], form: Mapping[str, str]) -> dict[str, Any]:
    """The object an interrupt's field form answers: text fields as text, the others parsed as JSON."""
    out: dict[str, Any] = {}
    for name, text in fields.items():
        if form.get(f"kind.{name}") == "text":
            out[name] = text.replace("\r\n", "\n")
            continue
        try:
            out[name] = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UIError(f"field {name!r} is not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    return out


async def answer_action(request: Request, backend: UIBackend) -> Response:
    form = await read_form(request)
    if not csrf.check(request, form):
        return forbidden(request)
    thread_id, interrupt_id = form.get("thread", ""), form.get("interrupt", "")
    key = f"{thread_id}|{interrupt_id}"
    try:
        answer = _answer_of(form)
        await backend.answer(thread_id, interrupt_id, answer)
    except UIError as exc:
        items = await backend.inbox()
        ctx = {"items": items, "errors": {key: str(exc)}, "answers": {key: form}}
        return render_page(request, "interrupts.html", ctx, 422)
    items = await backend.inbox()
    if any(i.thread_id == thread_id for i in items):  # asked again (an invalid answer): the error is shown in place
        return redirect(request, f"/interrupts#t-{quote(thread_id, safe='')}")
    return redirect(request, f"/threads/{quote(thread_id, safe='')}")
