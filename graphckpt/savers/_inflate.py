"""Bounded decompression of the blobs a saver compressed itself: never more memory than the output can need.

A stored compressed blob is untrusted: a 26-byte zstd frame may claim 3 GiB, a 2.6 MB zlib stream may inflate to
2.5 GiB. :func:`inflate` refuses, before allocating the output, anything larger than :data:`MAX_INFLATED` or than
its compressed length can legitimately hold, and raises :class:`ValueError` (with a one-line reason) for every
failure, never ``zlib.error`` or ``ZstdError``.

- zstd (what savers write): the frame must record its uncompressed size (the writer's ``ZstdCompressor.compress``
  always does). That size is checked against the cap and against the most a frame of that many bytes can decode to
  (a zstd block is at least 3 bytes and yields at most 128 KiB), then exactly that much is decoded.
- zlib (rows of earlier development versions): the stream records no size, so it is inflated once in small pieces
  only to count its size (nothing kept), then once more into a buffer of that size.
"""

from __future__ import annotations

import zlib
from typing import Final

import zstandard

__all__ = ["MAX_INFLATED", "ZSTD_MAGIC", "inflate"]

MAX_INFLATED: Final = 1 << 30
"""The largest blob a saver compresses, and so the largest a compressed blob may inflate to: 1 GiB, PostgreSQL's
limit for one value (a larger blob could never be stored uncompressed either)."""
ZSTD_MAGIC: Final = b"\x28\xb5\x2f\xfd"
"""The first bytes of a zstd frame; a zlib stream starts with ``0x78``."""
_ZLIB_MAX_RATIO: Final = 1032
"""Deflate's format limit: one compressed byte never yields more than about 1032."""
_PIECE: Final = 1 << 20


def inflate(data: bytes, *, limit: int = MAX_INFLATED) -> bytes:
    """The bytes ``data`` (a zstd frame or a zlib stream) compresses, at most ``limit`` of them; ``ValueError``
    otherwise."""
    if data.startswith(ZSTD_MAGIC):
        return _unzstd(data, limit)
    return _unzlib(data, limit)


def _unzstd(data: bytes, limit: int) -> bytes:
    try:
        size = zstandard.get_frame_parameters(data).content_size
    except zstandard.ZstdError as exc:
        raise ValueError(f"zstd frame header is invalid ({exc})") from None
    if size == zstandard.CONTENTSIZE_UNKNOWN:
        raise ValueError("zstd frame does not record its size")
    most = min(limit, (len(data) // 3 + 1) << 17)
    if size > most:
        raise ValueError(f"zstd frame of {len(data)} bytes claims {size} bytes, more than the {most} it can hold")
    try:
        out = zstandard.ZstdDecompressor().decompress(data)
    except zstandard.ZstdError as exc:
        raise ValueError(f"zstd frame does not decompress ({exc})") from None
    if len(out) != size:
        raise ValueError(f"zstd frame claims {size} bytes but holds {len(out)}")
    return out


def _unzlib(data: bytes, limit: int) -> bytes:
    size = _zlib_size(data, min(limit, len(data) * _ZLIB_MAX_RATIO + _PIECE))
    try:
        out = zlib.decompress(data, bufsize=max(size, 1))  # one buffer of the final size: no copy at the end
    except zlib.error as exc:  # pragma: no cover - the first pass decoded the same stream
        raise ValueError(f"zlib stream does not decompress ({exc})") from None
    if len(out) != size:  # pragma: no cover
        raise ValueError("zlib stream changed while it was read")
    return out


def _zlib_size(data: bytes, most: int) -> int:
    """The size ``data`` inflates to, counted piece by piece (nothing is kept); ``ValueError`` if it is not one
    complete stream or inflates past ``most`` bytes."""
    stream = zlib.decompressobj()
    size, rest = 0, data
    try:
        while not stream.eof:
            piece = stream.decompress(rest, _PIECE)
            rest = stream.unconsumed_tail
            size += len(piece)
            if size > most:
                raise ValueError(f"zlib stream of {len(data)} bytes inflates past {most} bytes")
            if not piece and not rest and not stream.eof:  # no input left and no progress
                raise ValueError("zlib stream is truncated")
    except zlib.error as exc:
        raise ValueError(f"zlib stream does not decompress ({exc})") from None
    return size
