"""``SaverConformance``: the suite every saver must pass. It is :mod:`graphckpt.savers.base` made executable.

A backend's test module subclasses it and provides one fixture, ``saver``, yielding an open saver::

    class TestMySaver(SaverConformance):
        @pytest.fixture
        async def saver(self):
            async with MySaver(...) as s:
                yield s

Every case is its own pytest item and uses only the public :class:`~graphckpt.savers.base.Saver` methods. Cases make
thread ids of their own and look only at those threads, so the saver may already hold other data. Bodies and blob
data are arbitrary bytes: a saver stores them and never looks inside.
"""

from __future__ import annotations

from graphckpt.testing._commits import CommitCases
from graphckpt.testing._erase import EraseCases
from graphckpt.testing._filters import FilterCases
from graphckpt.testing._forks import ForkAndDeleteCases
from graphckpt.testing._hostile import HostileValueCases
from graphckpt.testing._items import ItemCases
from graphckpt.testing._kept import KeptWriteAndFamilyCases
from graphckpt.testing._leases import LeaseCases
from graphckpt.testing._pages import PageCases
from graphckpt.testing._queue import QueueCases
from graphckpt.testing._reads import ReadCases
from graphckpt.testing._records import make_checkpoint
from graphckpt.testing._retention import RetentionCases
from graphckpt.testing._waits import WaitCases
from graphckpt.testing._writes import BlobAndWriteCases

__all__ = ["SaverConformance", "make_checkpoint"]


class SaverConformance(
    ReadCases,
    FilterCases,
    BlobAndWriteCases,
    CommitCases,
    ForkAndDeleteCases,
    EraseCases,
    HostileValueCases,
    KeptWriteAndFamilyCases,
    LeaseCases,
    QueueCases,
    PageCases,
    ItemCases,
    WaitCases,
    RetentionCases,
):
    """Subclass with an async ``saver`` fixture yielding an open :class:`~graphckpt.savers.base.Saver`."""
