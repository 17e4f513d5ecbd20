"""Hostile values for the serializer (issue 10): deeply nested stored bytes cost memory in proportion to their size
(checked in a child process under ``RLIMIT_AS``), and values that could not be read back are refused at write time."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import msgpack

ROOT = Path(__file__).resolve().parent.parent


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
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}", "MALLOC_ARENA_MAX": "1"}
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
