"""CSRF protection for the UI's forms: a double-submit cookie.

Every page response carries the cookie ``graphckpt_csrf`` (``HttpOnly``, ``SameSite=Strict``, set once per
browser); every form the UI renders carries the same value in a hidden ``csrf`` field. A POST is accepted only when
the field equals the cookie (compared in constant time) and the value is one this process issued: a random nonce and
its HMAC under a key made at start (so a value planted in the cookie by anyone else is refused; a restart expires
the forms). Another site can make a browser send the cookie, never read it to fill in the field.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Mapping

from starlette.requests import Request
from starlette.responses import Response

__all__ = ["COOKIE", "FIELD", "check", "ensure", "token_of"]

COOKIE = "graphckpt_csrf"
FIELD = "csrf"


_KEY = secrets.token_bytes(32)


def _sign(nonce: str) -> str:
    return hmac.new(_KEY, nonce.encode(), hashlib.sha256).hexdigest()


def issued(value: str) -> bool:
    """True when ``value`` is a token this process made (``NONCE.MAC``)."""
    nonce, _, mac = value.partition(".")
    return bool(nonce) and len(value) < 200 and hmac.compare_digest(_sign(nonce).encode(), mac.encode())


def token_of(request: Request) -> str:
    """The request's CSRF token: its cookie's, or a new one (:func:`ensure` then sets it on the response)."""
    token = request.cookies.get(COOKIE)
    if not token or not issued(token):
        nonce = secrets.token_urlsafe(24)
        token = request.state.__dict__.setdefault("new_csrf", f"{nonce}.{_sign(nonce)}")
    return token


def ensure(request: Request, response: Response) -> Response:
    """Set the cookie on ``response`` when :func:`token_of` made a new token for this request."""
    new = request.state.__dict__.get("new_csrf")
    if new:
        path = request.scope.get("root_path", "") or "/"
        response.set_cookie(COOKIE, new, httponly=True, samesite="strict", path=path)
    return response


def check(request: Request, form: Mapping[str, str]) -> bool:
    """True when the form's token is present, equals the cookie's, and was issued here."""
    cookie = request.cookies.get(COOKIE, "")
    sent = form.get(FIELD, "")
    return bool(cookie) and bool(sent) and hmac.compare_digest(cookie.encode(), sent.encode()) and issued(cookie)
