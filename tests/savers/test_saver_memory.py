"""``MemorySaver`` against the shared saver conformance suite."""

from collections.abc import AsyncIterator

import pytest

from graphckpt.savers.memory import MemorySaver
from graphckpt.testing import SaverConformance


class TestMemorySaver(SaverConformance):
    @pytest.fixture
    async def saver(self) -> AsyncIterator[MemorySaver]:
        async with MemorySaver() as s:
            yield s
