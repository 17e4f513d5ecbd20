"""``LazyJsonMapping``: metadata rows read from a database, parsed only when somebody looks inside."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from graphckpt.errors import CorruptCheckpointError

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
            try:
                data = json.loads(self._text)
            except (ValueError, RecursionError):
                raise CorruptCheckpointError("stored metadata is not valid JSON") from None
            if not isinstance(data, dict):  # a tampered row: never an assert (gone under -O)
                raise CorruptCheckpointError(f"stored metadata is not a JSON object (a {type(data).__name__})")
            self._data = data
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
