"""The UI's workbench handlers (mounted by :func:`~graphckpt.server.ui.routes.ui_routes`):

==========================================  =====================================================================
``GET /steps/{thread}@{checkpoint}``        a step: state before / after / difference, its tasks on one time axis
                                            (``Send`` tasks and subgraph tasks marked), their calls, node sources
``GET /chat/{thread}``                      the conversation of a thread whose state holds ``messages``
``GET /compare?a=THREAD&b=THREAD``          two branches side by side: fork point, diffs, tokens and time
``POST /actions/edit-message``              fork at a message's checkpoint with the message edited, then run it
``POST /actions/take-over``                 take a crashed thread over (its owner is gone): the server resumes it
==========================================  =====================================================================
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import Response

from graphckpt.diff import Diff
from graphckpt.server.ui import csrf
from graphckpt.server.ui.data import UIBackend, UIError
from graphckpt.server.ui.render import forbidden, line_diff, read_form, redirect, render_page, split_ref
from graphckpt.subgraph import SEPARATOR

__all__ = ["WORK_ROUTES"]

Handler = Callable[[Request, UIBackend], Awaitable[Response]]


def _changes(diff: Diff | None) -> list[tuple[Any, Any]]:
    return [(c, line_diff(c.before, c.after)) for c in diff.changes()] if diff is not None else []


async def step_page(request: Request, backend: UIBackend) -> Response:
    thread_id, checkpoint_id = split_ref(request.path_params["ref"])
    if checkpoint_id is None:
        checkpoint_id = (await backend.thread_view(thread_id)).info.head.checkpoint_id
        return redirect(request, f"/steps/{quote(thread_id, safe='')}@{checkpoint_id}")
    lineage = [  # a subgraph's child steps are nested in their parent step, not steps of this line
        s for s in await backend.checkpoints_of(thread_id) if s.thread_id == thread_id or SEPARATOR not in s.thread_id
    ]
    if all(s.checkpoint_id != checkpoint_id for s in lineage):  # a short id, as the CLI prints them
        found = [s for s in lineage if s.checkpoint_id.startswith(checkpoint_id)]
        if len(found) == 1:
            return redirect(request, f"/steps/{quote(thread_id, safe='')}@{found[0].checkpoint_id}")
    view = await backend.step_view(thread_id, checkpoint_id)
    at = [i for i, s in enumerate(lineage) if s.checkpoint_id == view.snap.checkpoint_id]
    here = at[0] if at else None
    ctx = {
        "view": view,
        "thread_id": thread_id,
        "changes": _changes(view.diff),
        "prev": lineage[here - 1] if here else None,
        "next": lineage[here + 1] if here is not None and here + 1 < len(lineage) else None,
    }
    return render_page(request, "step.html", ctx)


async def chat_page(request: Request, backend: UIBackend) -> Response:
    thread_id = request.path_params["thread_id"]
    talk = await backend.conversation(thread_id)
    if talk is None:
        raise UIError(f"thread {thread_id!r} has no conversation: its state holds no list of `messages`")
    view = await backend.thread_view(thread_id)
    stream = request.state.ui_stream and view.info.status in ("running", "crashed")
    ctx = {
        "talk": talk,
        "view": view,
        "stream": f"/events/{quote(thread_id, safe='')}" if stream else None,
    }
    return render_page(request, "chat.html", ctx)


async def compare_page(request: Request, backend: UIBackend) -> Response:
    a, b = request.query_params.get("a", "").strip(), request.query_params.get("b", "").strip()
    choices = await backend.all_thread_ids()
    if not a or not b:
        return render_page(request, "compare.html", {"cmp": None, "a": a, "b": b, "choices": choices})
    cmp = await backend.compare(a, b)
    ctx = {
        "cmp": cmp,
        "a": a,
        "b": b,
        "choices": choices,
        "at_fork": _changes(cmp.at_fork),
        "at_heads": _changes(cmp.at_heads),
    }
    return render_page(request, "compare.html", ctx)


async def edit_message_action(request: Request, backend: UIBackend) -> Response:
    form = await read_form(request)
    if not csrf.check(request, form):
        return forbidden(request)
    thread_id, checkpoint_id = form.get("thread", ""), form.get("checkpoint", "")
    new_id = form.get("new_thread_id", "").strip() or None
    made = await backend.edit_message(
        thread_id, checkpoint_id, form.get("message", ""), form.get("content", ""), new_id
    )
    return redirect(request, f"/chat/{quote(made, safe='')}")


async def take_over_action(request: Request, backend: UIBackend) -> Response:
    form = await read_form(request)
    if not csrf.check(request, form):
        return forbidden(request)
    thread_id = form.get("thread", "")
    await backend.take_over(thread_id)
    return redirect(request, f"/threads/{quote(thread_id, safe='')}")


WORK_ROUTES: list[tuple[str, Handler, str, str]] = [
    ("/steps/{ref:path}", step_page, "GET", "ui_step"),
    ("/chat/{thread_id:path}", chat_page, "GET", "ui_chat"),
    ("/compare", compare_page, "GET", "ui_compare"),
    ("/actions/edit-message", edit_message_action, "POST", "ui_edit_message"),
    ("/actions/take-over", take_over_action, "POST", "ui_take_over"),
]
"""``(path, handler, method, name)`` of each workbench route."""
