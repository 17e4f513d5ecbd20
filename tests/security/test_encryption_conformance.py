"""The saver conformance suite on SQLite and PostgreSQL with a keyring (``require=True``): sealing is invisible to
every caller. Left out: the metadata filter cases, which filter on arbitrary top-level keys; with a keyring those
keys are sealed and such a filter is refused (``test_encryption.test_filtering_on_encrypted_metadata_is_refused``)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from support.postgres import PG_DSN

from graphckpt.encryption import Keyring
from graphckpt.savers.postgres import PostgresSaver
from graphckpt.savers.sqlite import SqliteSaver
from graphckpt.testing import SaverConformance

RING = Keyring({"k1": os.urandom(32)}, require=True)
FILTER_CASES = {name: None for name in dir(SaverConformance) if name.startswith("test_filter")}  # not collected


class TestSealedSqliteSaver(SaverConformance):
    locals().update(FILTER_CASES)

    @pytest.fixture
    async def saver(self, tmp_path: Path) -> AsyncIterator[SqliteSaver]:
        async with SqliteSaver(tmp_path / "c.db", encryption=RING) as s:
            yield s


class TestSealedPostgresSaver(SaverConformance):
    locals().update(FILTER_CASES)

    @pytest.fixture
    async def saver(self, pg_schema: str) -> AsyncIterator[PostgresSaver]:
        async with PostgresSaver(PG_DSN, schema=pg_schema, encryption=RING) as s:
            yield s
