"""CSRF protection for the UI's forms: a double-submit cookie.

Every page response carries the cookie ``graphckpt_csrf`` (random, ``HttpOnly``, ``SameSite=Strict``, set once per
browser); every form the UI renders carries the same value in a hidden ``csrf`` field. A POST is accepted only when
the field equals the cookie (compared in constant time): another site can make a browser send the cookie, never read
it to fill in the field.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Mapping

from starlette.requests import Request
from starlette.responses import Response

__all__ = ["COOKIE", "FIELD", "check", "ensure", "token_of"]

COOKIE = "graphckpt_csrf"
FIELD = "csrf"


def token_of(request: Request) -> str:
    """The request's CSRF token: its cookie's, or a new one (:func:`ensure` then sets it on the response)."""
    token = request.cookies.get(COOKIE)
    if not token or len(token) < 20:
        token = request.state.__dict__.setdefault("new_csrf", secrets.token_urlsafe(32))
    return token


def ensure(request: Request, response: Response) -> Response:
    """Set the cookie on ``response`` when :func:`token_of` made a new token for this request."""
    new = request.state.__dict__.get("new_csrf")
    if new:
        path = request.scope.get("root_path", "") or "/"
        response.set_cookie(COOKIE, new, httponly=True, samesite="strict", path=path)
    return response


def check(request: Request, form: Mapping[str, str]) -> bool:
    """True when the form's token is present and equals the cookie's."""
    cookie = request.cookies.get(COOKIE, "")
    sent = form.get(FIELD, "")
    return bool(cookie) and bool(sent) and hmac.compare_digest(cookie.encode(), sent.encode())
