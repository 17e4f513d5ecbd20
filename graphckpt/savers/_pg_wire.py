"""psycopg adapters of PostgresSaver: parameters packed in PostgreSQL's binary format in one pass, and ``json``
loaded without re-encoding; blob kinds as stored."""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from typing import Any, cast

import psycopg
from psycopg.adapt import Dumper, Loader
from psycopg.pq import Format

from graphckpt.savers.base import BlobKind
from graphckpt.savers.lazyjson import LazyJsonMapping

KIND_CODE: dict[BlobKind, int] = {"snapshot": 0, "delta": 1, "chunk": 4}
COMPRESSED = 2
"""Added to ``blobs.kind`` when the saver stored ``data`` compressed (zstd; zlib in files of earlier versions)."""
KIND_NAME: dict[int, BlobKind] = {code | z: kind for kind, code in KIND_CODE.items() for z in (0, COMPRESSED)}
"""``blobs.kind`` to the blob kind, compressed or not."""


class Packed(bytes):
    """A parameter already in PostgreSQL's binary format: sent as it is (psycopg's generic list adaptation inspects
    every element on every call; these arrays are built in one pass instead)."""

    __slots__ = ()
    oid = 0


class TextArray(Packed):
    __slots__ = ()
    oid = 1009


class Int8Array(Packed):
    __slots__ = ()
    oid = 1016


class Int2Array(Packed):
    __slots__ = ()
    oid = 1005


class ByteaArray(Packed):
    __slots__ = ()
    oid = 1001


class JsonText(Packed):
    """Compact JSON text; the binary format of ``json`` is its text."""

    __slots__ = ()
    oid = 114


class PackedDumper(Dumper):
    format = Format.BINARY

    def __init__(self, cls: type, context: Any = None) -> None:
        super().__init__(cls, context)
        self.oid = cast(type[Packed], cls).oid

    def dump(self, obj: Any) -> bytes:
        return cast(bytes, obj)


_raw_decode = json.JSONDecoder().raw_decode


class JsonLoader(Loader):
    """``json`` in binary format (its text) without ``json.loads``'s byte-encoding detection: half the cost per
    row, which is most of ``list_checkpoints``. The server validated the text; we wrote it compactly."""

    format = Format.BINARY

    def load(self, data: Any) -> Any:
        text = str(data, "utf-8")
        if text.startswith("{"):  # metadata objects: parsed only when somebody looks inside (long histories)
            return LazyJsonMapping(text)
        try:
            value, end = _raw_decode(text)
        except ValueError:
            return json.loads(text)  # leading whitespace: not written by this saver, but valid
        return value if end == len(text) else json.loads(text)


def register_adapters(conn: psycopg.AsyncConnection[Any]) -> None:
    for cls in (TextArray, Int8Array, Int2Array, ByteaArray, JsonText):
        conn.adapters.register_dumper(cls, PackedDumper)
    conn.adapters.register_loader("json", JsonLoader)


_I4 = struct.Struct("!i")
ELEM_I8 = struct.Struct("!iq")
ELEM_I2 = struct.Struct("!ih")


def array(oid: int, elements: list[bytes]) -> bytes:
    """A one-dimensional array without NULLs in binary format; ``elements`` are encoded (length-prefixed) already."""
    if not elements:
        return struct.pack("!iii", 0, 0, oid)
    return struct.pack("!iiiii", 1, 0, oid, len(elements), 1) + b"".join(elements)


def bytes_elements(values: Sequence[bytes]) -> list[bytes]:
    return [_I4.pack(len(v)) + v for v in values]


async def configure(conn: psycopg.AsyncConnection[Any]) -> None:
    register_adapters(conn)
