"""Run webhooks (LangGraph's ``webhook`` field of a run): when the run ends, its record (LangGraph's run shape, with
the thread's ``values`` at the end and ``webhook_sent_at``) is POSTed as JSON to the URL the run was created with.

Only to the hosts the server allows (``graphckpt serve --webhook-host NAME``, ``create_app(webhook_hosts=...)``):
a URL naming any other host, or not ``http``/``https``, is refused when the run is submitted (422 naming
``body.webhook``), so a client cannot make the server call into a network it can reach and the client cannot. A
delivery that fails (no connection, a timeout, a 5xx or 429 answer) is tried again, :data:`ATTEMPTS` times in all,
waiting :data:`BACKOFF` seconds, then twice as long each time; another 4xx answer ends it (the receiver refused it).
Deliveries are not durable: a server that stops while one is pending does not send it after its restart."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Collection, Mapping
from typing import Any
from urllib.parse import urlsplit

from graphckpt.server.errors import ApiError

__all__ = ["ATTEMPTS", "BACKOFF", "TIMEOUT", "checked_url", "deliver"]

logger = logging.getLogger("graphckpt.server")

ATTEMPTS = 5
"""Deliveries tried at most, the first included."""
BACKOFF = 0.5
"""Seconds before the second attempt; each later wait doubles."""
TIMEOUT = 10.0
"""Seconds one attempt may take."""


def checked_url(url: str, allowed: Collection[str]) -> str:
    """``url`` when it is an ``http``/``https`` URL to an allowed host; else 422 naming ``body.webhook``."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ApiError(422, "ValidationError", "body.webhook: must be an http:// or https:// URL with a host")
    if parts.hostname.lower() not in allowed:
        hint = ", ".join(sorted(allowed)) or "none (allow one with graphckpt serve --webhook-host NAME)"
        raise ApiError(
            422, "ValidationError", f"body.webhook: host {parts.hostname!r} is not an allowed webhook host: {hint}"
        )
    return url


async def deliver(url: str, payload: Mapping[str, Any], *, attempts: int = ATTEMPTS, backoff: float = BACKOFF) -> bool:
    """POST ``payload`` (plus ``webhook_sent_at``) to ``url``, retrying as the module docstring says; returns
    whether the receiver accepted it (a 2xx answer)."""
    import httpx

    wait = backoff
    async with httpx.AsyncClient(timeout=TIMEOUT, follow_redirects=False) as client:
        for attempt in range(1, attempts + 1):
            body = {**payload, "webhook_sent_at": dt.datetime.now(dt.UTC).isoformat()}
            try:
                response = await client.post(url, json=body)
            except httpx.HTTPError as exc:
                reason = f"{type(exc).__name__}: {exc}"
            else:
                if response.is_success:
                    return True
                reason = f"HTTP {response.status_code}"
                if response.status_code < 500 and response.status_code != 429:
                    logger.warning("webhook %s refused the run's record (%s): not sent again", url, reason)
                    return False
            if attempt < attempts:
                logger.info("webhook %s failed (%s); attempt %d in %.1f s", url, reason, attempt + 1, wait)
                await asyncio.sleep(wait)
                wait *= 2
            else:
                logger.warning("webhook %s failed (%s) %d times: given up", url, reason, attempts)
    return False
