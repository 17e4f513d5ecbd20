"""PostgreSQL connection URLs as messages may show them: :func:`redact_url` (``user@host:port/dbname``) and
:func:`scrub_password` (a message with the URL's password taken out, however it was quoted). The CLI and the
PostgreSQL saver both use them; no message graphckpt prints carries a password."""

from __future__ import annotations

from urllib.parse import parse_qsl, unquote, urlsplit

__all__ = ["redact_url", "scrub_password"]


def scrub_password(message: str, url: str | None) -> str:
    """``message`` without the password of the ``postgresql://`` URL ``url``, as written or percent-decoded (a driver
    quotes a part of the URL it cannot parse as it is written)."""
    if not url or not url.startswith(("postgresql://", "postgres://")):
        return message
    try:
        parts = urlsplit(url)
        written = [parts.password, *(v for k, v in parse_qsl(parts.query) if k == "password")]
        written += [v for k, v in parse_qsl(parts.query.replace("+", "%2B")) if k == "password"]
    except ValueError:
        userinfo = url.split("://", 1)[1].rpartition("@")[0]
        written = [userinfo.partition(":")[2]]
    for password in sorted({p for w in written if w for p in (w, unquote(w))}, key=len, reverse=True):
        message = message.replace(password, "***")
    return message


def redact_url(url: str) -> str:
    """A ``postgresql://`` URL as ``user@host:port/dbname`` (no password, no query); other text unchanged."""
    if not url.startswith(("postgresql://", "postgres://")):
        return url
    try:
        parts = urlsplit(url)
        user = parts.username
    except ValueError:
        return "<unparsable postgresql:// URL>"
    where = parts.netloc.rpartition("@")[2] or "localhost"
    return f"{unquote(user) + '@' if user else ''}{where}{parts.path or ''}"
