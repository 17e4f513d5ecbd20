"""``LazyJsonMapping``: metadata rows read from a database, parsed only when somebody looks inside."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from graphckpt.errors import CorruptCheckpointError
from graphckpt.savers._checks import brief

__all__ = ["LazyJsonMapping"]


class LazyJsonMapping(Mapping[str, Any]):
    """A read-only mapping over JSON object text, parsed on first access (metadata of rows nobody looks at is
    never parsed). Equal to any mapping with the same items; ``dict(m)`` gives a plain dict."""

    __slots__ = ("_data", "_text")

    def __init__(self, text: str) -> None:
        self._text = text
        self._data: dict[str, Any] | None = None

    def _parsed(self) -> dict[str, Any]:
        data = self._data
        if data is None:
            data = self._data = _object(self._text)
        return data

    def __getitem__(self, key: str) -> Any:
        return self._parsed()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._parsed())

    def __len__(self) -> int:
        return len(self._parsed())

    def __contains__(self, key: object) -> bool:
        return key in self._parsed()

    def get(self, key: str, default: Any = None) -> Any:
        return self._parsed().get(key, default)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LazyJsonMapping):
            other = other._parsed()
        if isinstance(other, Mapping):
            return self._parsed() == (other if isinstance(other, dict) else dict(other.items()))
        return NotImplemented

    def __repr__(self) -> str:
        return repr(self._parsed())

    def __reduce__(self) -> tuple[Any, ...]:
        return (LazyJsonMapping, (self._text,))


def _object(text: str) -> dict[str, Any]:
    """The JSON object ``text``. Integers longer than Python converts from text (4300 digits; no saver writes one,
    an edited row may hold one) read as floats; text that is not a JSON object raises
    :class:`~graphckpt.errors.CorruptCheckpointError`, never a ``ValueError`` from deep inside a reader."""
    try:
        try:
            data = json.loads(text)
        except ValueError as exc:
            if "integer string conversion" not in str(exc):
                raise
            data = json.loads(text, parse_int=_int_or_float)
    except ValueError as exc:
        raise CorruptCheckpointError(f"stored metadata is not JSON ({brief(str(exc))})") from None
    except RecursionError:
        raise CorruptCheckpointError("stored metadata is not JSON (nested too deeply)") from None
    if not isinstance(data, dict):
        raise CorruptCheckpointError(f"stored metadata is not a JSON object but {brief(text)!r}")
    return data


def _int_or_float(digits: str) -> int | float:
    try:
        return int(digits)
    except ValueError:
        return float(digits)
