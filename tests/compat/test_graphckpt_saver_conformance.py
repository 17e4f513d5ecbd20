"""LangGraph's own checkpointer conformance suite (``langgraph-checkpoint-conformance``, as published) against
:class:`graphckpt.compat.langgraph.GraphckptSaver` on graphckpt's memory, SQLite and PostgreSQL savers: every base
and extended capability, every test."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate
from support.postgres import PG_DSN, require_postgres
from support.savers import SAVER_KINDS, open_saver

from graphckpt.compat.langgraph import GraphckptSaver

BASE = {"put", "put_writes", "get_tuple", "list", "delete_thread"}
EXTENDED = {"delete_for_runs", "copy_thread", "prune"}


@pytest.mark.parametrize("kind", SAVER_KINDS)
async def test_langgraph_conformance_passes_every_test(kind: str, tmp_path: Path) -> None:
    schemas: list[str] = []
    if kind == "postgres":
        require_postgres()

    async def factory() -> AsyncIterator[GraphckptSaver]:
        schema = None
        if kind == "postgres":
            schema = f"gc_test_{uuid.uuid4().hex[:12]}"
            schemas.append(schema)
        where = tmp_path / uuid.uuid4().hex
        where.mkdir()
        saver = GraphckptSaver(await open_saver(kind, where, schema))
        try:
            yield saver
        finally:
            saver.close()

    registered = checkpointer_test(name=f"GraphckptSaver[{kind}]")(factory)
    try:
        report = await validate(registered)
    finally:
        if schemas:
            import psycopg

            async with await psycopg.AsyncConnection.connect(PG_DSN, autocommit=True) as conn:
                for schema in schemas:
                    await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    results = report.results
    assert set(results) == BASE | EXTENDED
    failures = [f for r in results.values() for f in r.failures]
    passed = sum(r.tests_passed for r in results.values())
    assert not failures, "\n".join(failures)
    states = {name: (r.detected, r.passed) for name, r in results.items()}
    assert all(detected and ok for detected, ok in states.values()), states
    assert passed == 81
