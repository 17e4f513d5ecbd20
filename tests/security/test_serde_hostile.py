"""Hostile values for the serializer: deeply nested stored bytes cost memory in proportion to their size
(checked in a child process under ``RLIMIT_AS``), and values that could not be read back are refused at write time."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import textwrap
import zoneinfo
from pathlib import Path
from typing import Any

import msgpack
import pytest
from pydantic import BaseModel, Field
from support import REPO, child_env

from graphckpt import END, START, CorruptCheckpointError, SerializationError, StateGraph
from graphckpt.savers.sqlite import SqliteSaver
from graphckpt.serde import Serializer

ROOT = REPO


def nested_tuples(levels: int) -> bytes:
    """``((((),),),)``: the empty tuple inside ``levels`` one-item tuples, as stored bytes (about 4 bytes a level)."""
    data = msgpack.packb(msgpack.ExtType(1, b"\x90"))  # (): a tuple extension holding the empty list
    for _ in range(levels):
        data = msgpack.packb(msgpack.ExtType(1, b"\x91" + data))  # (data,): a list of one item, already encoded
    return data


NESTED_CHILD = textwrap.dedent(
    """
    import resource, sys, threading
    from test_serde_hostile import nested_tuples
    from graphckpt import CorruptCheckpointError
    from graphckpt.serde import Serializer

    serde = Serializer()
    values = {levels: nested_tuples(levels) for levels in (120, 300)}
    threading.stack_size(4 << 20)
    vm = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmSize:")) * 1024
    resource.setrlimit(resource.RLIMIT_AS, (vm + int(sys.argv[1]), resource.RLIM_INFINITY))
    results = []

    def read(levels):
        try:
            value = serde.loads(values[levels])
            depth = 0
            while value:
                value, depth = value[0], depth + 1
            results.append(f"{levels}:read:{depth}")
        except CorruptCheckpointError as exc:
            results.append(f"{levels}:corrupt:{exc}")

    readers = [threading.Thread(target=read, args=(levels,)) for levels in (120, 120, 300, 300)]
    for t in readers:
        t.start()
    for t in readers:
        t.join()
    print("\\n".join(sorted(results)))
    """
)


def test_nested_values_cost_memory_by_their_size_not_a_buffer_per_level() -> None:
    """Four concurrent reads of a 0.5 KB value nested 120 deep and a 1.4 KB one nested 300 deep (refused: deeper
    than the serializer reads) fit in 64 MiB (16 of them the threads' stacks); with a 1 MiB buffer per level they
    needed about 840 MiB."""
    assert len(nested_tuples(300)) < 1500
    env = child_env(ROOT, Path(__file__).parent, MALLOC_ARENA_MAX="1")  # this module and support import there
    out = subprocess.run(
        [sys.executable, "-c", NESTED_CHILD, str(64 << 20)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[:2] == ["120:read:120", "120:read:120"], out.stdout
    assert all(line.startswith("300:corrupt:") and "MemoryError" not in line for line in lines[2:]), out.stdout
    assert len(lines) == 4


class Counter(BaseModel):
    count: int = Field(0, ge=0)
    label: str = ""


class Holder(BaseModel):
    counters: list[Counter] = []


def test_a_model_mutated_into_an_invalid_state_is_refused_naming_the_field() -> None:
    serde = Serializer([Holder, Counter])
    bad = Counter()
    bad.count = -5  # no validate_assignment: pydantic accepts it
    with pytest.raises(SerializationError, match=r"Counter: field 'count' is invalid .*greater than or equal to 0"):
        serde.dumps(bad)
    with pytest.raises(SerializationError, match="field 'count'"):
        serde.dumps(Holder(counters=[Counter(count=1), Counter.model_construct(count=-1)]))
    good = Holder(counters=[Counter(count=2, label="x")])
    assert serde.loads(serde.dumps(good)) == good


class Tally(BaseModel):
    counter: Counter = Field(default_factory=Counter)
    n: int = 0


async def test_a_run_storing_an_invalid_model_fails_at_write_time_and_the_head_stays_readable(tmp_path: Path) -> None:
    def bump(s: Tally) -> dict[str, Any]:
        s.counter.count = -5
        return {"counter": s.counter, "n": s.n + 1}

    g = StateGraph(Tally)
    g.add_node("bump", bump)
    g.add_edge(START, "bump")
    g.add_edge("bump", END)
    app = g.compile(saver=SqliteSaver(tmp_path / "c.db"))
    try:
        with pytest.raises(SerializationError, match=r"'counter'.*field 'count' is invalid") as info:
            await app.ainvoke({}, thread_id="t")
        assert info.value.field == "counter"
        head = await app.aget_state("t")  # the input checkpoint stays the head, and reads back
        assert head.values.counter == Counter() and head.values.n == 0
    finally:
        await app.aclose()


def test_a_zoneinfo_datetime_keeps_its_zone_across_dst() -> None:
    serde = Serializer()
    paris = zoneinfo.ZoneInfo("Europe/Paris")
    winter = dt.datetime(2026, 1, 15, 9, 30, tzinfo=paris)
    back = serde.loads(serde.dumps(winter))
    assert back == winter and back.tzinfo is paris
    later = back + dt.timedelta(days=180)  # what a resumed run does with it: wall-clock arithmetic in the zone
    assert later.utcoffset() == dt.timedelta(hours=2) and later.hour == 9
    ambiguous = dt.datetime(2026, 10, 25, 2, 30, fold=1, tzinfo=paris)  # the second 02:30, UTC+1
    again = serde.loads(serde.dumps(ambiguous))
    assert (again.fold, again.utcoffset(), again.tzinfo) == (1, dt.timedelta(hours=1), paris)
    fixed = dt.datetime(2026, 1, 15, 9, 30, tzinfo=dt.timezone(dt.timedelta(hours=1)))
    assert serde.dumps(fixed) == msgpack.packb(msgpack.ExtType(4, fixed.isoformat().encode()))  # format unchanged
    assert serde.loads(serde.dumps(fixed)) == fixed


@pytest.mark.parametrize("key", ["../../etc/passwd", "No/Such_Zone", "", "/abs"])
def test_a_stored_zone_key_that_is_not_a_zone_is_corrupt(key: str) -> None:
    data = msgpack.packb(msgpack.ExtType(13, msgpack.packb(["2026-01-15T09:30:00+01:00", key])))
    with pytest.raises(CorruptCheckpointError):
        Serializer().loads(data)
