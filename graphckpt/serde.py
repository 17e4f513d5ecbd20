"""Safe serialization: msgpack plus an explicit registry of extension types. No pickle, no imports by name.

What can be stored: ``None``, ``bool``, ``int``, ``float``, ``str``, ``bytes``, ``list``, ``dict`` (any storable keys),
``tuple``, ``set``, ``frozenset``, ``datetime`` (in a ``ZoneInfo`` zone it comes back in that zone, not at a fixed
offset), ``date``, ``time``, ``timedelta``, ``UUID``, ``Decimal``, ``Path``, and the pydantic models and ``Enum``
classes *registered* with the serializer (the engine registers every one that the state schema mentions). A model is
validated as it is encoded, so what is stored loads back. Anything else is refused at write time with
:class:`SerializationError`.

Loading only ever builds the types above; a registered model or enum is found by the name it was registered under,
never imported. Bytes that do not decode raise :class:`CorruptCheckpointError` (the caller adds thread and checkpoint).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import enum
import functools
import pathlib
import types
import typing
import uuid
import zoneinfo
from collections.abc import Callable, Iterable
from typing import Any

import msgpack
import pydantic
import typing_extensions

from graphckpt.errors import CorruptCheckpointError, SerializationError

__all__ = ["Serializer", "types_in"]

# extension codes: part of the stored format, never renumber
_TUPLE, _SET, _FROZENSET, _DATETIME, _DATE, _TIME, _TIMEDELTA, _UUID, _DECIMAL, _PATH, _ENUM, _MODEL = range(1, 13)
_ZONED_DATETIME = 13  # a datetime in a named zone: [isoformat (with its offset), zone key]
_CUSTOM = 14  # a registered dataclass or a class with a registered codec: [registry name, its encoded form]

_MAX_DEPTH = 256  # extension values (tuple, set, model, ...) nested in each other, when reading
_MAX_WRITE_DEPTH = 128  # and when writing: anything written stays readable, with room to spare


def types_in(annotation: Any) -> Iterable[type]:
    """Every pydantic model and Enum class reachable from a type annotation (fields of models included)."""
    seen: set[int] = set()
    stack = [annotation]
    while stack:
        tp = stack.pop()
        if id(tp) in seen:
            continue
        seen.add(id(tp))
        if isinstance(tp, type) and issubclass(tp, pydantic.BaseModel):
            yield tp
            stack.extend(f.annotation for f in tp.model_fields.values())
        elif isinstance(tp, type) and issubclass(tp, enum.Enum):
            yield tp
        elif isinstance(tp, type) and typing_extensions.is_typeddict(tp):
            stack.extend(typing.get_type_hints(tp).values())
        stack.extend(a for a in typing.get_args(tp) if not isinstance(a, (str, int, float, bool, types.NoneType)))


class Serializer:
    """Encodes values to bytes and back with a fixed, explicit type registry."""

    def __init__(self, registered: Iterable[type] = (), *, raw: bool = False) -> None:
        """``raw``: read stored models as their dict of fields and enums as their value, whatever type they name
        (for readers without the schema); nothing is looked up."""
        self.raw = raw
        self._by_name: dict[str, type] = {}
        self._hooks: dict[int, Callable[[int, bytes], Any]] = {}  # ext_hook per nesting depth, made once
        self._defaults: dict[int, Callable[[Any], msgpack.ExtType]] = {}  # default per nesting depth, made once
        self._names: dict[type, str] = {}
        self._codecs: dict[type, tuple[Callable[[Any], Any], Callable[[Any], Any]]] = {}
        for tp in registered:
            self.register(tp)

    def register(self, tp: type) -> None:
        """Allow a pydantic model, Enum class or dataclass to be stored. Its registry name is its qualified name.
        A dataclass is stored as its ``init`` fields by name and built again by calling the class with them."""
        if dataclasses.is_dataclass(tp) and not issubclass(tp, (pydantic.BaseModel, enum.Enum)):
            names = [f.name for f in dataclasses.fields(tp) if f.init]
            self.register_codec(tp, lambda obj: {n: getattr(obj, n) for n in names}, lambda fields: tp(**fields))
            return
        if not (issubclass(tp, pydantic.BaseModel) or issubclass(tp, enum.Enum)):
            raise TypeError(f"only pydantic models, Enum classes and dataclasses can be registered, not {tp!r}")
        self._add_name(tp)

    def register_codec(self, tp: type, encode: Callable[[Any], Any], decode: Callable[[Any], Any]) -> None:
        """Allow instances of exactly ``tp`` to be stored as ``encode(obj)`` (any storable value) and loaded as
        ``decode(that value)``. Its registry name is its qualified name; loading finds it by that name only."""
        if tp in self._codecs:
            return
        self._add_name(tp)
        self._codecs[tp] = (encode, decode)

    def _add_name(self, tp: type) -> None:
        if tp in self._names:
            return
        name = f"{tp.__module__}.{tp.__qualname__}"
        other = self._by_name.get(name)
        if other is not None and other is not tp:
            raise TypeError(f"two different types share the name {name!r}")
        self._by_name[name] = tp
        self._names[tp] = name

    # -- encoding ----------------------------------------------------------------------------------------------------

    def dumps(self, value: Any) -> bytes:
        """Encode ``value``. Raises :class:`SerializationError` naming the type that cannot be stored."""
        return self._dumps(value, 0)

    def _dumps(self, value: Any, depth: int) -> bytes:
        if depth > _MAX_WRITE_DEPTH:  # each level costs stack on write and read: refused before it can crash
            raise SerializationError("cannot store value: it nests too deeply (or contains itself)")
        default = self._defaults.get(depth)
        if default is None:
            default = self._defaults[depth] = functools.partial(self._default, depth=depth + 1)
        try:
            return msgpack.packb(value, default=default, strict_types=True, use_bin_type=True)  # type: ignore[no-any-return]
        except SerializationError:
            raise
        except (TypeError, ValueError, OverflowError, RecursionError) as exc:
            raise SerializationError(f"cannot store value: {exc}") from exc

    def _default(self, obj: Any, depth: int) -> msgpack.ExtType:
        pack = functools.partial(self._dumps, depth=depth)
        tp = type(obj)
        if tp is tuple:
            return msgpack.ExtType(_TUPLE, pack(list(obj)))
        if tp is set:
            return msgpack.ExtType(_SET, pack(_sorted_if_possible(obj)))
        if tp is frozenset:
            return msgpack.ExtType(_FROZENSET, pack(_sorted_if_possible(obj)))
        if tp is dt.datetime:
            zone = obj.tzinfo
            if type(zone) is zoneinfo.ZoneInfo and zone.key is not None:  # the zone, not only today's offset
                return msgpack.ExtType(_ZONED_DATETIME, pack([obj.isoformat(), zone.key]))
            return msgpack.ExtType(_DATETIME, obj.isoformat().encode())
        if tp is dt.date:
            return msgpack.ExtType(_DATE, obj.isoformat().encode())
        if tp is dt.time:
            return msgpack.ExtType(_TIME, obj.isoformat().encode())
        if tp is dt.timedelta:
            return msgpack.ExtType(_TIMEDELTA, pack([obj.days, obj.seconds, obj.microseconds]))
        if tp is uuid.UUID:
            return msgpack.ExtType(_UUID, obj.bytes)
        if tp is decimal.Decimal:
            return msgpack.ExtType(_DECIMAL, str(obj).encode())
        if isinstance(obj, pathlib.PurePath):
            return msgpack.ExtType(_PATH, str(obj).encode())
        name = self._names.get(tp)
        codec = self._codecs.get(tp) if name is not None else None
        if codec is not None:
            return msgpack.ExtType(_CUSTOM, pack([name, codec[0](obj)]))
        if name is not None:
            if isinstance(obj, enum.Enum):
                return msgpack.ExtType(_ENUM, pack([name, obj.value]))
            fields = {key: getattr(obj, key) for key in type(obj).model_fields}
            extra = obj.__pydantic_extra__  # extra="allow" (the openai client's models): kept, or they are lost
            if extra:
                fields.update((key, value) for key, value in extra.items() if key not in fields)
            _check_model(tp, fields)
            return msgpack.ExtType(_MODEL, pack([name, fields]))
        if tp in (bool, int, float, str, list, dict, bytes):
            raise SerializationError(f"cannot store this {tp.__name__}: it is too large or nests too deeply")
        raise SerializationError(
            f"cannot store a value of type {tp.__module__}.{tp.__qualname__}: store plain data, or name the "
            "pydantic model or Enum in the state schema (or, for a Send payload, in the annotation of the target "
            "node's first parameter) so it is registered"
        )

    # -- decoding ----------------------------------------------------------------------------------------------------

    def loads(self, data: bytes) -> Any:
        """Decode bytes made by :meth:`dumps`. Raises :class:`CorruptCheckpointError` on anything else."""
        try:
            return self._loads(data, 0)
        except CorruptCheckpointError:
            raise
        except Exception as exc:  # msgpack raises many types on hostile input; none may escape as-is
            detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            raise CorruptCheckpointError(f"stored bytes do not decode ({detail})") from None

    def _loads(self, data: bytes, depth: int) -> Any:
        if depth > _MAX_DEPTH:
            raise CorruptCheckpointError("stored value nests too deeply")
        hook = self._hooks.get(depth)
        if hook is None:
            hook = self._hooks[depth] = functools.partial(self._ext, depth=depth + 1)
        if depth == 0:
            return msgpack.unpackb(data, ext_hook=hook, raw=False, strict_map_key=False, use_list=True)
        # An extension's payload is decoded from inside the outer decode. ``unpackb`` keeps ~40 KiB of parser state
        # on the C stack per call, so nested calls overflowed it (a segfault) at ~190 levels on an 8 MiB stack and at
        # ~25 on a 1 MiB thread stack; an ``Unpacker`` keeps that state on the heap.
        # Its buffer is sized by the data (the default reserves 1 MiB per level: 256 MiB for a 1.4 KB value).
        size = max(len(data), 1)
        unpacker = msgpack.Unpacker(
            ext_hook=hook, raw=False, strict_map_key=False, use_list=True, max_buffer_size=size, read_size=size
        )
        unpacker.feed(data)
        value = unpacker.unpack()
        if unpacker.tell() != len(data):
            raise CorruptCheckpointError("stored extension payload has extra bytes")
        return value

    def _ext(self, code: int, payload: bytes, depth: int) -> Any:
        if code == _TUPLE:
            return tuple(self._seq(payload, depth))
        if code == _SET:
            return set(self._seq(payload, depth))
        if code == _FROZENSET:
            return frozenset(self._seq(payload, depth))
        if code == _DATETIME:
            return dt.datetime.fromisoformat(payload.decode())
        if code == _ZONED_DATETIME:
            text, key = self._seq(payload, depth)
            if not isinstance(text, str) or not isinstance(key, str):
                raise CorruptCheckpointError("stored zoned datetime has the wrong shape")
            return dt.datetime.fromisoformat(text).astimezone(zoneinfo.ZoneInfo(key))  # the same instant
        if code == _DATE:
            return dt.date.fromisoformat(payload.decode())
        if code == _TIME:
            return dt.time.fromisoformat(payload.decode())
        if code == _TIMEDELTA:
            days, seconds, micros = self._seq(payload, depth)
            return dt.timedelta(days=days, seconds=seconds, microseconds=micros)
        if code == _UUID:
            return uuid.UUID(bytes=payload)
        if code == _DECIMAL:
            return decimal.Decimal(payload.decode())
        if code == _PATH:
            return pathlib.Path(payload.decode())
        if code == _CUSTOM:
            name, inner = self._seq(payload, depth)
            if self.raw:
                return inner
            tp = self._by_name.get(name) if isinstance(name, str) else None
            codec = self._codecs.get(tp) if tp is not None else None
            if codec is None:
                raise CorruptCheckpointError(f"stored value names an unregistered type {name!r}; it was not loaded")
            try:
                return codec[1](inner)
            except CorruptCheckpointError:
                raise
            except Exception as exc:
                raise CorruptCheckpointError(
                    f"stored value for {name!r} does not load ({type(exc).__name__})"
                ) from None
        if code in (_ENUM, _MODEL):
            name, inner = self._seq(payload, depth)
            if self.raw:
                return inner
            tp = self._by_name.get(name) if isinstance(name, str) else None
            if tp is None:
                raise CorruptCheckpointError(f"stored value names an unregistered type {name!r}; it was not loaded")
            if code == _ENUM and issubclass(tp, enum.Enum):
                return tp(inner)
            if code == _MODEL and issubclass(tp, pydantic.BaseModel) and isinstance(inner, dict):
                return tp.model_validate(inner, by_name=True)  # fields are stored by name, not by alias (pydantic 2.11)
            raise CorruptCheckpointError(f"stored value for {name!r} has the wrong shape")
        raise CorruptCheckpointError(f"unknown extension code {code}")

    def _seq(self, payload: bytes, depth: int) -> list[Any]:
        value = self._loads(payload, depth)
        if not isinstance(value, list):
            raise CorruptCheckpointError("stored extension payload is not a list")
        return value


def _check_model(tp: type[pydantic.BaseModel], fields: dict[str, Any]) -> None:
    """Refuse a model that reading it back would refuse: one mutated into an invalid state (an assignment without
    ``validate_assignment``, ``model_construct``) is validated here as :meth:`Serializer.loads` will."""
    try:
        tp.model_validate(fields, by_name=True)
    except pydantic.ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"]) or "(the model)"
        raise SerializationError(
            f"cannot store this {tp.__qualname__}: field {where!r} is invalid ({error['msg']}); it would not load back"
        ) from None


def _sorted_if_possible(items: Iterable[Any]) -> list[Any]:
    """Sets are stored sorted when their items allow it, so equal sets encode to equal bytes."""
    as_list = list(items)
    try:
        return sorted(as_list)
    except TypeError:
        return as_list
