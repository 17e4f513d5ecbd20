"""Erasure through ``graphckpt serve``: ``DELETE /threads/{id}`` refuses a thread that forks depend on (409 naming
them) and ``?cascade=true`` deletes them too."""

from __future__ import annotations

from collections.abc import Callable

import httpx
from support.serving import Served


def test_delete_of_a_forked_thread_is_409_naming_the_forks_and_cascade_deletes_them(
    serve: Callable[..., Served],
) -> None:
    server = serve(["support.server_graphs:counter"])
    with httpx.Client(base_url=server.url, timeout=30) as c:
        c.post("/threads", json={"thread_id": "a"}).raise_for_status()
        c.post("/threads/a/runs/wait", json={"input": {"limit": 3}}).raise_for_status()
        assert c.post("/threads/a/fork", json={"step": 1, "new_thread_id": "b"}).status_code == 201
        refused = c.delete("/threads/a")
        assert refused.status_code == 409
        assert refused.json()["error"] == "ThreadHasForksError" and "'b'" in refused.json()["message"]
        assert c.get("/threads/a").status_code == 200
        bad = c.delete("/threads/a", params={"cascade": "perhaps"})
        assert bad.status_code == 422 and "cascade" in bad.json()["message"]
        assert c.delete("/threads/a", params={"cascade": "true"}).status_code == 204
        assert c.get("/threads/a").status_code == 404 and c.get("/threads/b").status_code == 404
