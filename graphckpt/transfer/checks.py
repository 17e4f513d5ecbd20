"""What every field and every byte of an import must pass before anything is written.

An export is untrusted input: it may come from another machine, another version, or someone who wants to hurt the
target. :mod:`graphckpt.transfer` parses it with these checks, so that an import either stores a thread every reader
can read, or refuses the file with one line and writes nothing. The rules:

- **Types are exact.** A step is a JSON integer (not ``"1"``, ``1.5``, ``true`` or ``1e400``); ids are non-empty
  text; nothing is coerced.
- **Nothing a saver would refuse at commit time.** Text holds no NUL and no lone surrogate (PostgreSQL and SQLite
  refuse them) and ids stay short enough for an index; numbers fit the columns (steps in 64 bits, write indexes in 32);
  times are finite and representable as a date; metadata is a JSON object of finite numbers, nested at most
  :data:`METADATA_DEPTH` deep.
- **Every stored byte is decoded once**, schema-free (:func:`decode`): first by a msgpack reader whose every limit is
  the length of the bytes themselves (a header announcing 4 billion items in 5 bytes is refused before anything is
  allocated; nesting is bounded), then by the same schema-free loader the reading commands use. Extension types are
  checked by code; a model or enum is only ever a *name* (never imported, never called), and that name must look
  like the ``module.QualName`` graphckpt writes, of a class that can be one (:func:`_names_a_class`). Pickle, zstd
  frames, trailing bytes and unknown extension codes are refused.

Every check raises ``ValueError`` with a message naming the field; the caller adds the export line.
"""

from __future__ import annotations

import ast
import datetime as dt
import enum
import importlib.machinery
import math
import re
import sys
from collections.abc import Callable
from typing import Any

import msgpack
import pydantic

from graphckpt.errors import CorruptCheckpointError

__all__ = [
    "ID_MAX_BYTES",
    "METADATA_DEPTH",
    "clip",
    "cut",
    "decode",
    "index",
    "metadata",
    "optional_text",
    "step",
    "text",
    "timestamp",
]

ID_MAX_BYTES = 1024
"""Ids, channel names and task ids: at most this many bytes of UTF-8 (PostgreSQL's btree index refuses an entry
above ~2,700 bytes at commit time)."""
METADATA_DEPTH = 64
"""Metadata nests at most this deep (objects and arrays)."""
_STEP_MAX = 2**63 - 1  # PostgreSQL bigint
_INDEX_MAX = 2**31 - 1  # PostgreSQL integer
_EXT_DEPTH = 256  # extension values nested in each other (the reader's own limit)

# extension codes of graphckpt.serde (part of the stored format)
_TUPLE, _SET, _FROZENSET, _DATETIME, _DATE, _TIME, _TIMEDELTA, _UUID, _DECIMAL, _PATH, _ENUM, _MODEL = range(1, 13)
_NESTED = frozenset({_TUPLE, _SET, _FROZENSET, _TIMEDELTA, _ENUM, _MODEL})  # payload is msgpack itself
_TYPE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_<][A-Za-z0-9_<>]*)+")


def cut(value: object, limit: int = 60) -> str:
    """``repr(value)`` cut to about ``limit`` characters, for messages about hostile input."""
    return clip(repr(value), limit)


def clip(text: str, limit: int = 60) -> str:
    """``text`` cut to ``limit`` characters (the end replaced by ``...``)."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _encodable(value: str, what: str) -> None:
    if "\x00" in value:
        raise ValueError(f"{what} contains a NUL character")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{what} contains a lone surrogate (not UTF-8 text)") from None


def text(value: Any, what: str) -> str:
    """Non-empty text without NUL or lone surrogates, at most :data:`ID_MAX_BYTES` bytes."""
    if type(value) is not str or not value:
        raise ValueError(f"{what} must be non-empty text, got {cut(value)}")
    _encodable(value, what)
    if len(value.encode("utf-8")) > ID_MAX_BYTES:
        raise ValueError(f"{what} is longer than {ID_MAX_BYTES} bytes ({cut(value)})")
    return value


def optional_text(value: Any, what: str) -> str | None:
    """``None``, or text as :func:`text` requires (but of any length, and possibly empty)."""
    if value is None:
        return None
    if type(value) is not str:
        raise ValueError(f"{what} must be text or null, got {cut(value)}")
    _encodable(value, what)
    return value


def _integer(value: Any, what: str, high: int) -> int:
    if type(value) is not int:  # not bool, not float, not text
        raise ValueError(f"{what} must be an integer, got {cut(value)}")
    if not 0 <= value <= high:
        raise ValueError(f"{what} must be between 0 and {high}, got {cut(value)}")
    return value


def step(value: Any, what: str = "step") -> int:
    """A super-step number: an integer from 0 to 2**63 - 1."""
    return _integer(value, what, _STEP_MAX)


def index(value: Any, what: str = "index") -> int:
    """A pending write's index: an integer from 0 to 2**31 - 1."""
    return _integer(value, what, _INDEX_MAX)


def timestamp(value: Any, what: str = "created_at") -> float:
    """Seconds since the epoch: a finite number that is a representable date."""
    if type(value) not in (int, float):
        raise ValueError(f"{what} must be a number, got {cut(value)}")
    number = float(value) if type(value) is float or abs(value) < 2**53 else math.inf
    if not math.isfinite(number):
        raise ValueError(f"{what} must be a finite number, got {cut(value)}")
    try:
        dt.datetime.fromtimestamp(number, dt.UTC)
    except (OverflowError, OSError, ValueError):
        raise ValueError(f"{what} is not a representable time ({cut(value)})") from None
    return number


def metadata(value: Any, what: str = "metadata") -> dict[str, Any]:
    """A JSON object of finite numbers and UTF-8 text, nested at most :data:`METADATA_DEPTH` deep."""
    if type(value) is not dict:
        raise ValueError(f"{what} must be a JSON object, got {cut(value)}")
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > METADATA_DEPTH:
                raise ValueError(f"{what} nests deeper than {METADATA_DEPTH} levels")
            if isinstance(item, dict):
                for key, inner in item.items():
                    _encodable(key, f"a key of {what}")
                    stack.append((inner, depth + 1))
            else:
                stack.extend((inner, depth + 1) for inner in item)
        elif type(item) is str:
            _encodable(item, f"a text of {what}")
        elif type(item) is float and not math.isfinite(item):
            raise ValueError(f"{what} holds a non-finite number ({item})")
        elif item is not None and type(item) not in (bool, int, float):
            raise ValueError(f"{what} holds a {type(item).__name__}")
    return value


# -- stored bytes ------------------------------------------------------------------------------------------------------


def decode(data: bytes, what: str, loads: Callable[[bytes], Any]) -> Any:
    """``data`` decoded by ``loads`` (the schema-free loader), after :func:`_bounded` proved it is plain graphckpt
    msgpack whose every length fits in the bytes. Raises ``ValueError`` naming ``what``."""
    try:
        _bounded(data, 0)
    except ValueError as exc:
        raise ValueError(f"{what} does not decode ({exc})") from None
    try:
        return loads(data)
    except CorruptCheckpointError as exc:
        raise ValueError(f"{what} does not decode ({exc})") from None


class _Ext:
    """An extension value already checked (a placeholder: only its code matters to the walk)."""

    __slots__ = ("code",)

    def __init__(self, code: int) -> None:
        self.code = code


def _bounded(data: bytes, depth: int) -> Any:
    """Decode ``data`` as one msgpack value with every limit set to its length; extension payloads recursively."""
    if depth > _EXT_DEPTH:
        raise ValueError("extension values nest too deeply")
    if not data:
        raise ValueError("no bytes")

    def hook(code: int, payload: bytes) -> _Ext:
        _ext(code, payload, depth + 1)
        return _Ext(code)

    unpacker = msgpack.Unpacker(
        raw=False, strict_map_key=False, use_list=True, max_buffer_size=len(data), ext_hook=hook, timestamp=0
    )
    try:
        unpacker.feed(data)
        value = unpacker.unpack()
    except ValueError:
        raise
    except RecursionError:
        raise ValueError("nests too deeply") from None
    except Exception as exc:  # msgpack raises many types on hostile input
        raise ValueError(type(exc).__name__ + (f": {exc}" if str(exc) else "")) from None
    if unpacker.tell() != len(data):
        raise ValueError(f"{len(data) - unpacker.tell()} extra bytes after the value")
    _walk(value)
    return value


def _walk(value: Any) -> None:
    """Only graphckpt's plain types (a msgpack timestamp extension, say, is not one)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif item is not None and not isinstance(item, bool | int | float | str | bytes | _Ext):
            raise ValueError(f"a {type(item).__name__} value is not a graphckpt type")


def _ext(code: int, payload: bytes, depth: int) -> None:
    if not 1 <= code <= _MODEL:
        raise ValueError(f"unknown extension code {code}")
    if code not in _NESTED:
        return  # dates, UUID, Decimal, Path: bytes the loader parses (and refuses when they do not parse)
    inner = _bounded(payload, depth)
    if not isinstance(inner, list):
        raise ValueError(f"extension {code} does not hold a list")
    if code in (_ENUM, _MODEL):
        if len(inner) != 2 or not isinstance(inner[0], str) or _TYPE_NAME.fullmatch(inner[0]) is None:
            raise ValueError(f"extension {code} does not name a type as graphckpt writes it ({cut(inner[:1])})")
        if code == _MODEL and not isinstance(inner[1], dict):
            raise ValueError("a stored model's fields are not a map")
        _names_a_class(inner[0], pydantic.BaseModel if code == _MODEL else enum.Enum)


_SOURCE_MAX = 4 << 20  # a module's source read to find a class statement in it (bytes)


def _names_a_class(name: str, kind: type) -> None:
    """Refuse a stored type name that graphckpt cannot have written: one naming anything but a ``kind`` class.

    Nothing is imported or called. A name in a module this process already loaded is looked up in the modules'
    ``vars`` (no ``__getattr__``); a name in the standard library (loaded or not) must be such a class there (the
    standard library has no pydantic model); a name in a module that is not loaded is looked for as ``class``
    statements in the module's source, found on ``sys.path`` (the current directory included) without running it.
    A module this machine does not have (or ``__main__``: the exporting script) is only a name (the reader never looks
    it up): accepted."""
    parts = name.split(".")
    if parts[0] == "__main__":
        return  # the exporting program's script, not this process's
    for cut_at in range(len(parts) - 1, 0, -1):
        module = sys.modules.get(".".join(parts[:cut_at]))
        if module is not None:
            value: Any = module
            for part in parts[cut_at:]:
                value = vars(value).get(part) if hasattr(value, "__dict__") else None
            if isinstance(value, type) and issubclass(value, kind):
                return
            raise ValueError(f"{cut(name)} names no {kind.__name__} class (graphckpt never stores such a name)")
    top = parts[0]
    if top in sys.stdlib_module_names or top in sys.builtin_module_names:
        raise ValueError(f"{cut(name)} names no {kind.__name__} class (graphckpt never stores such a name)")
    source = _module_source(parts)
    if source is not None and not _class_statement(source[0], source[1]):
        raise ValueError(f"{cut(name)} names no class of its module's source (graphckpt never stores such a name)")


def _module_source(parts: list[str]) -> tuple[str, list[str]] | None:
    """The source of the longest module prefix of ``parts`` found on ``sys.path`` (statically: nothing runs), and the
    rest of ``parts`` (the qualified name inside it); ``None`` when no prefix is found."""
    found: tuple[str, list[str]] | None = None
    search: list[str] | None = None
    for at in range(1, len(parts)):
        try:
            spec = importlib.machinery.PathFinder.find_spec(".".join(parts[:at]), search)
        except (ImportError, ValueError, OSError):
            break
        if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
            break
        found = (spec.origin, parts[at:])
        if spec.submodule_search_locations is None:
            break
        search = list(spec.submodule_search_locations)
    if found is None:
        return None
    try:
        with open(found[0], "rb") as handle:
            return handle.read(_SOURCE_MAX).decode("utf-8", "replace"), found[1]
    except OSError:
        return None


def _class_statement(source: str, qualname: list[str]) -> bool:
    """``qualname`` is a chain of ``class`` statements in ``source`` (a class defined in a function, whose name
    holds ``<locals>``, is accepted when the source has a class of its last name anywhere)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return True  # not Python we can read: no evidence either way, the name stays a name
    if "<locals>" in qualname:
        return any(isinstance(n, ast.ClassDef) and n.name == qualname[-1] for n in ast.walk(tree))
    nodes: list[ast.AST] = list(ast.walk(tree))  # the outermost class may sit in an ``if`` or ``try``
    for part in qualname:
        match = next((n for n in nodes if isinstance(n, ast.ClassDef) and n.name == part), None)
        if match is None:
            return False
        nodes = list(match.body)
    return True
