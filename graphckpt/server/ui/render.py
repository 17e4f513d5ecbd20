"""How the UI answers: its templates and their filters, a page with the UI's security headers, a redirect (the
POST-redirect-GET of every action), a form read with a size limit, and the small text helpers the handlers share
(``thread@checkpoint`` refs, line diffs)."""

from __future__ import annotations

import datetime as dt
import difflib
import json
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.templating import Jinja2Templates

from graphckpt.control import END, START
from graphckpt.server.ui import csrf
from graphckpt.server.ui.records import answer_fields

__all__ = [
    "HERE",
    "MAX_FORM",
    "TEMPLATES",
    "forbidden",
    "line_diff",
    "read_form",
    "redirect",
    "render_page",
    "split_ref",
]

HERE = Path(__file__).parent
MAX_FORM = 1 << 20


def _short(checkpoint_id: str | None) -> str:
    return (checkpoint_id or "")[:12]


def _when(value: dt.datetime) -> str:
    return value.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _duration(seconds: float) -> str:
    """``42 s``, ``3 min 5 s``, ``2 h 10 min``, ``3 d 4 h``."""
    s = int(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def _templates() -> Jinja2Templates:
    t = Jinja2Templates(directory=str(HERE / "templates"))
    t.env.filters.update(
        short=_short,
        when=_when,
        pretty=_pretty,
        duration=_duration,
        answer_fields=answer_fields,
        q=lambda s: quote(str(s), safe=""),
    )
    t.env.globals.update(START=START, END=END)
    return t


TEMPLATES = _templates()


def render_page(request: Request, name: str, context: dict[str, Any], status: int = 200) -> Response:
    """The page ``name`` (a template) with ``context``, its CSRF token and the UI's security headers."""
    base = request.scope.get("root_path", "")
    ctx = {"base": base, "csrf_token": csrf.token_of(request), "path": request.url.path, **context}
    response = TEMPLATES.TemplateResponse(request, name, ctx, status_code=status)
    response.headers["Content-Security-Policy"] = (
        "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    )
    response.headers["X-Content-Type-Options"] = "nosniff"
    return csrf.ensure(request, response)


def redirect(request: Request, where: str) -> Response:
    return RedirectResponse(request.scope.get("root_path", "") + where, status_code=303)


async def read_form(request: Request) -> dict[str, str]:
    """The request's form fields; a form over :data:`MAX_FORM` bytes is refused (413) before more of it is read."""
    too_large = HTTPException(413, f"the form is larger than {MAX_FORM} bytes")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_FORM:
        raise too_large
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM:
            raise too_large
    return dict(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))


def split_ref(ref: str) -> tuple[str, str | None]:
    """``thread@checkpoint`` (split at the last ``@``) or a bare ``thread``."""
    if "@" in ref:
        thread, _, checkpoint = ref.rpartition("@")
        return thread, checkpoint or None
    return ref, None


def line_diff(before: Any, after: Any) -> list[tuple[str, str]] | None:
    """For two texts of several lines: their lines as ``(" " | "-" | "+", line)``, unchanged runs of more than six
    lines cut to their ends with a ``("…", "N unchanged lines")`` marker; else ``None`` (shown side by side)."""
    if not (isinstance(before, str) and isinstance(after, str)) or ("\n" not in before and "\n" not in after):
        return None
    out: list[tuple[str, str]] = []
    same: list[str] = []

    def flush(last: bool) -> None:
        if len(same) > 6:
            head = [] if not out else same[:2]
            tail = [] if last else same[-2:]
            out.extend((" ", s) for s in head)
            out.append(("…", f"{len(same) - len(head) - len(tail)} unchanged lines"))
            out.extend((" ", s) for s in tail)
        else:
            out.extend((" ", s) for s in same)
        same.clear()

    for line in difflib.ndiff(before.splitlines(), after.splitlines()):
        tag, text = line[:1], line[2:]
        if tag == "?":
            continue
        if tag == " ":
            same.append(text)
            continue
        flush(False)
        out.append((tag, text))
    flush(True)
    return out


def forbidden(request: Request) -> Response:
    """The page a form with a missing or wrong CSRF token gets (403)."""
    return render_page(
        request,
        "error.html",
        {"title": "Form expired", "message": "the form's CSRF token is missing or wrong: reload the page and retry"},
        403,
    )
