"""Safe serialization (invariant 6): an explicit registry, no pickle, hostile bytes are refused without running code."""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import enum
import pathlib
import subprocess
import sys
import threading
import uuid
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field

from graphckpt import CorruptCheckpointError, SerializationError
from graphckpt.serde import Serializer, types_in


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Point(BaseModel):
    x: int
    y: int
    color: Color = Color.RED


class Shape(BaseModel):
    points: list[Point]
    tags: set[str] = set()


serde = Serializer(types_in(Shape))

VALUES: list[Any] = [
    None,
    True,
    -(2**63),
    2**64 - 1,
    1.5,
    "ünïcode ✓",
    b"\x00bytes",
    [1, [2, [3]]],
    {"a": {"b": None}},
    (1, "two", (3,)),
    {3, 1, 2},
    frozenset({"x"}),
    dt.datetime(2026, 11, 29, 9, 0, tzinfo=dt.UTC),
    dt.datetime(2026, 1, 1, 12, 30),
    dt.date(2026, 2, 3),
    dt.time(4, 5, 6, 7),
    dt.timedelta(days=1, seconds=2, microseconds=3),
    uuid.UUID("12345678-1234-5678-1234-567812345678"),
    decimal.Decimal("3.1400"),
    pathlib.Path("/tmp/x"),
    Color.BLUE,
    Point(x=1, y=2),
    Shape(points=[Point(x=0, y=0, color=Color.BLUE)], tags={"t"}),
    {(1, 2): "tuple key", 3: "int key"},
]


@pytest.mark.parametrize("value", VALUES, ids=lambda v: type(v).__name__)
def test_round_trip_keeps_type_and_value(value: Any) -> None:
    back = serde.loads(serde.dumps(value))
    assert back == value and type(back) is type(value)


def test_types_in_finds_nested_models_and_enums() -> None:
    assert set(types_in(Shape)) == {Shape, Point, Color}


def test_unregistered_type_is_refused_at_write_time() -> None:
    class Secret:
        pass

    with pytest.raises(SerializationError, match=r"test_serde\..*Secret"):
        serde.dumps({"k": Secret()})
    with pytest.raises(SerializationError):
        Serializer().dumps(Point(x=1, y=1))  # a model nobody registered


def test_subclass_of_builtin_is_refused() -> None:
    class MyList(list[int]):
        pass

    with pytest.raises(SerializationError, match="MyList"):
        serde.dumps(MyList([1]))


def test_payload_naming_an_unregistered_class_is_not_loaded() -> None:
    evil = msgpack.packb(msgpack.ExtType(12, msgpack.packb(["os.system", {"command": "echo pwned"}])))
    with pytest.raises(CorruptCheckpointError, match=r"unregistered type 'os\.system'"):
        serde.loads(evil)
    evil_enum = msgpack.packb(msgpack.ExtType(11, msgpack.packb(["builtins.eval", "1+1"])))
    with pytest.raises(CorruptCheckpointError, match="unregistered type"):
        serde.loads(evil_enum)


def test_pickle_bytes_are_not_unpickled(tmp_path: pathlib.Path) -> None:
    import pickle

    marker = tmp_path / "ran"

    class Boom:
        def __reduce__(self) -> Any:
            return (pathlib.Path.touch, (marker,))

    with pytest.raises(CorruptCheckpointError):
        serde.loads(pickle.dumps(Boom()))
    assert not marker.exists()


def test_registered_model_with_invalid_fields_is_corrupt_not_built() -> None:
    bad = msgpack.packb(msgpack.ExtType(12, msgpack.packb([serde._names[Point], {"x": "not-an-int", "y": 1}])))
    with pytest.raises(CorruptCheckpointError):
        serde.loads(bad)


def test_deep_nesting_is_refused_cleanly() -> None:
    deep: Any = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(SerializationError):
        serde.dumps(deep)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=512))
def test_fuzzed_bytes_never_escape_as_other_errors(data: bytes) -> None:
    with contextlib.suppress(CorruptCheckpointError):
        serde.loads(data)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([serde.dumps(v) for v in VALUES]), st.data())
def test_truncated_or_flipped_bytes_are_corrupt_or_decode(blob: bytes, data: st.DataObject) -> None:
    cut = data.draw(st.integers(min_value=0, max_value=len(blob)))
    flip = data.draw(st.integers(min_value=0, max_value=255))
    mutated = bytearray(blob[:cut])
    if mutated:
        mutated[data.draw(st.integers(min_value=0, max_value=len(mutated) - 1))] ^= flip
    with contextlib.suppress(CorruptCheckpointError):
        serde.loads(bytes(mutated))


json_like = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False) | st.text() | st.binary(),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text(max_size=5), children, max_size=4)
        | st.tuples(children, children)
    ),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(json_like)
def test_round_trip_property(value: Any) -> None:
    assert serde.loads(serde.dumps(value)) == value


def test_nested_tuples_sets_and_models_are_refused_at_write_time_not_a_crash() -> None:
    deep: Any = ()
    for i in range(400):
        deep = (deep,) if i % 2 else [deep, frozenset({i})]  # every level an extension value
    with pytest.raises(SerializationError, match="nests too deeply"):
        serde.dumps(deep)
    cyclic: list[Any] = []
    cyclic.append((cyclic,))  # contains itself through a tuple: was an uncaught RecursionError
    with pytest.raises(SerializationError):
        serde.dumps(cyclic)


def test_storable_nesting_reads_back_in_a_small_thread_stack() -> None:
    value: Any = ()
    for _ in range(100):
        value = (value, Point(x=1, y=2))
    blob = serde.dumps(value)
    result: list[Any] = []
    threading.stack_size(1 << 20)  # 1 MiB: unpackb nested in ext hooks crashed the process here at ~25 levels
    try:
        worker = threading.Thread(target=lambda: result.append(serde.loads(blob)))
        worker.start()
        worker.join()
    finally:
        threading.stack_size(0)
    assert result == [value]


def test_hostile_deeply_nested_extension_bytes_do_not_crash_the_process() -> None:
    code = """
import msgpack
from graphckpt import CorruptCheckpointError
from graphckpt.serde import Serializer
blob = msgpack.packb([])
for _ in range(300):
    blob = msgpack.packb(msgpack.ExtType(1, b"\\x91" + blob))  # a tuple holding a tuple holding ...
try:
    Serializer().loads(blob)
except CorruptCheckpointError:
    pass
print("survived")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr  # was -11: a segfault in msgpack's C decoder
    assert done.stdout.strip() == "survived"


class Aliased(BaseModel):
    user_name: str = Field(alias="userName")
    when: dt.date = Field(validation_alias="day", default=dt.date(2026, 1, 1))


def test_model_with_aliased_fields_round_trips() -> None:
    aliased = Serializer([Aliased])
    value = [Aliased(userName="ada", day=dt.date(2026, 2, 3))]
    assert aliased.loads(aliased.dumps(value)) == value  # was CorruptCheckpointError: "userName" missing
