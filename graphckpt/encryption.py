"""Encryption at rest: a :class:`Keyring` of AES-GCM keys, and the sealed format of one stored value.

A sealed value is ``MAGIC | version | flags | len(key id) | key id | nonce (12 bytes) | ciphertext and tag``. The
plaintext is compressed first (zstd when ``zstandard`` is installed, else zlib; ``flags`` says which, and nothing
when compressing does not pay). The associated data is the header (so the key id and flags cannot be swapped) plus a
*context* the caller gives: the row's identity (thread, checkpoint or step, field). A ciphertext copied to another
row, or under another key id, fails to open: :class:`~graphckpt.errors.EncryptionError`, never garbage.

``MAGIC`` starts with ``0xc1``, a byte msgpack never uses, so a sealed value is never mistaken for a plaintext
one (graphckpt's values are msgpack). Text columns (metadata, event payloads) hold :data:`TEXT_PREFIX` followed by
the sealed bytes in URL-safe base64.

Keys: ``GRAPHCKPT_ENCRYPTION_KEYS=id2:BASE64,id1:BASE64`` (:meth:`Keyring.from_env`): the first key seals, every
key opens. ``cryptography`` (the ``encryption`` extra) is imported only when a keyring is made.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import threading
import zlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from graphckpt.errors import EncryptionError

__all__ = [
    "ENV_KEYS",
    "ENV_REQUIRE",
    "MAGIC",
    "TEXT_PREFIX",
    "Keyring",
    "encrypted",
    "is_sealed",
    "sealed_key_id",
    "text_key_id",
]

ENV_KEYS: Final = "GRAPHCKPT_ENCRYPTION_KEYS"
ENV_REQUIRE: Final = "GRAPHCKPT_REQUIRE_ENCRYPTION"
MAGIC: Final = b"\xc1gc"
TEXT_PREFIX: Final = "gcenc1:"
_VERSION: Final = 1
_RAW, _ZLIB, _ZSTD = 0, 1, 2
_COMPRESS_MIN: Final = 96
"""Shorter plaintexts are sealed as they are: compressing them saves nothing worth the time."""
_NONCE: Final = 12
_KEY_ID = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
_MAX_PLAIN: Final = 1 << 30


def encrypted(saver: object) -> bool:
    """Whether ``saver`` seals what it writes: its ``sealer`` (see :mod:`graphckpt.savers._sealing`) holds a
    keyring. The memory saver, and savers of other projects, never do."""
    return getattr(getattr(saver, "sealer", None), "keyring", None) is not None


def is_sealed(data: bytes) -> bool:
    """Whether stored bytes are a sealed value (else they are plaintext)."""
    return data[:3] == MAGIC


def sealed_key_id(data: bytes) -> str | None:
    """The key id a sealed value names, or ``None`` for plaintext or a truncated header."""
    if not is_sealed(data) or len(data) < 6:
        return None
    return data[6 : 6 + data[5]].decode("ascii", "replace")


class Keyring:
    """AES-GCM keys by id: the first seals, all open.

    ``keys``: ``(id, key)`` pairs or a mapping in that order; a key is 16, 24 or 32 bytes (AES-128/192/256).
    ``plain_tags``: the run tags (``tags=`` keys) that stay readable in checkpoint metadata so they can be
    filtered on; every other tag is sealed (see :mod:`graphckpt.savers._sealing`). ``require``: refuse to read or
    write a plaintext row (``require_encryption``).
    """

    def __init__(
        self,
        keys: Mapping[str, bytes] | Sequence[tuple[str, bytes]],
        *,
        plain_tags: Iterable[str] = (),
        require: bool = False,
    ) -> None:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM  # the `encryption` extra

        pairs = list(keys.items()) if isinstance(keys, Mapping) else list(keys)
        if not pairs:
            raise EncryptionError("a keyring needs at least one key")
        self._ciphers: dict[str, Any] = {}
        for key_id, key in pairs:
            if not isinstance(key_id, str) or not _KEY_ID.fullmatch(key_id):
                raise EncryptionError(f"key id {key_id!r} must be 1-64 of A-Z a-z 0-9 _ . -", key_id=str(key_id))
            if key_id in self._ciphers:
                raise EncryptionError(f"key id {key_id!r} appears twice", key_id=key_id)
            if not isinstance(key, bytes | bytearray) or len(key) not in (16, 24, 32):
                size = len(key) if isinstance(key, bytes | bytearray) else type(key).__name__
                raise EncryptionError(f"key {key_id!r} must be 16, 24 or 32 bytes, not {size}", key_id=key_id)
            self._ciphers[key_id] = AESGCM(bytes(key))
        self.current_id: str = pairs[0][0]
        """The id of the key that seals."""
        self.plain_tags: frozenset[str] = frozenset(plain_tags)
        self.require = require
        self._header = MAGIC + bytes([_VERSION]) + b"%c%c" + self.current_id.encode()
        self._compress = _compressor()

    def __repr__(self) -> str:  # never the keys
        return f"Keyring(current={self.current_id!r}, ids={list(self._ciphers)!r}, require={self.require})"

    @property
    def key_ids(self) -> list[str]:
        return list(self._ciphers)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Keyring | None:
        """The keyring ``GRAPHCKPT_ENCRYPTION_KEYS`` describes (``None`` when it is unset or empty).
        ``GRAPHCKPT_REQUIRE_ENCRYPTION=1`` sets ``require``; ``GRAPHCKPT_PLAIN_TAGS=a,b`` sets ``plain_tags``."""
        env = os.environ if environ is None else environ
        spec = env.get(ENV_KEYS, "").strip()
        if not spec:
            if env.get(ENV_REQUIRE, "") not in ("", "0"):
                raise EncryptionError(f"{ENV_REQUIRE} is set but {ENV_KEYS} is not")
            return None
        pairs: list[tuple[str, bytes]] = []
        for item in spec.split(","):
            key_id, sep, b64 = item.strip().partition(":")
            if not sep:
                raise EncryptionError(f"{ENV_KEYS}: {key_id!r} is not ID:BASE64", key_id=key_id or None)
            try:
                key = base64.b64decode(b64.strip(), validate=True)
            except (binascii.Error, ValueError):
                raise EncryptionError(f"{ENV_KEYS}: key {key_id!r} is not valid base64", key_id=key_id) from None
            pairs.append((key_id.strip(), key))
        tags = [t.strip() for t in env.get("GRAPHCKPT_PLAIN_TAGS", "").split(",") if t.strip()]
        return cls(pairs, plain_tags=tags, require=env.get(ENV_REQUIRE, "") not in ("", "0"))

    # -- bytes -------------------------------------------------------------------------------------------------------

    def seal(self, data: bytes, context: bytes) -> bytes:
        """``data`` compressed (when that pays) and encrypted under the current key, bound to ``context``."""
        flags = _RAW
        if len(data) >= _COMPRESS_MIN:
            kind, packed = self._compress(data)
            if len(packed) < len(data):
                flags, data = kind, packed
        header = self._header % (flags, len(self.current_id))
        nonce = os.urandom(_NONCE)
        sealed: bytes = self._ciphers[self.current_id].encrypt(nonce, data, header + context)
        return header + nonce + sealed

    def open(self, data: bytes, context: bytes, what: str) -> bytes:
        """The plaintext of the sealed ``data`` (see :func:`is_sealed`); ``what`` names the row in errors."""
        from cryptography.exceptions import InvalidTag

        if len(data) < 6 or data[3] != _VERSION:
            raise EncryptionError(f"{what}: encrypted in an unknown format")
        end = 6 + data[5]
        key_id = data[6:end].decode("ascii", "replace")
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            raise EncryptionError(
                f"{what} is encrypted with key {key_id!r}, which the keyring does not hold (it has "
                f"{', '.join(map(repr, self._ciphers))}); add it to {ENV_KEYS}",
                key_id=key_id,
            )
        try:
            plain: bytes = cipher.decrypt(data[end : end + _NONCE], data[end + _NONCE :], data[:end] + context)
        except InvalidTag:
            raise EncryptionError(
                f"{what} does not decrypt with key {key_id!r}: a wrong key under that id, or the row was altered "
                "or moved from another row",
                key_id=key_id,
            ) from None
        flags = data[4]
        if flags == _RAW:
            return plain
        if flags in (_ZLIB, _ZSTD):
            try:
                return _decompress(flags, plain)
            except (ValueError, zlib.error, ImportError) as exc:
                raise EncryptionError(f"{what}: decrypted, but does not decompress ({exc})", key_id=key_id) from None
        raise EncryptionError(f"{what}: unknown compression {flags}", key_id=key_id)

    # -- text --------------------------------------------------------------------------------------------------------

    def seal_text(self, text: str, context: bytes) -> str:
        return TEXT_PREFIX + base64.urlsafe_b64encode(self.seal(text.encode(), context)).decode("ascii")

    def open_text(self, token: str, context: bytes, what: str) -> str:
        return self.open(_token_bytes(token, what), context, what).decode()


def _token_bytes(token: str, what: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(token[len(TEXT_PREFIX) :])
    except (binascii.Error, ValueError):
        raise EncryptionError(f"{what}: an encrypted value that is not valid base64") from None


def text_key_id(token: str) -> str | None:
    """The key id of a sealed text value (see :data:`TEXT_PREFIX`), ``None`` when it is not one."""
    if not token.startswith(TEXT_PREFIX):
        return None
    try:
        return sealed_key_id(base64.urlsafe_b64decode(token[len(TEXT_PREFIX) : len(TEXT_PREFIX) + 96] + "=="))
    except (binascii.Error, ValueError):
        return None


def _compressor() -> Any:
    """``data -> (flags, compressed)``: zstd (level 3) when ``zstandard`` is installed, else zlib (level 6). A
    zstd compressor is not thread-safe: each thread gets its own."""
    try:
        import zstandard
    except ImportError:
        return lambda data: (_ZLIB, zlib.compress(data, 6))
    local = threading.local()

    def compress(data: bytes) -> tuple[int, bytes]:
        zstd = getattr(local, "zstd", None)
        if zstd is None:
            zstd = local.zstd = zstandard.ZstdCompressor(level=3)
        return _ZSTD, zstd.compress(data)

    return compress


def _decompress(flags: int, data: bytes) -> bytes:
    """The bytes ``data`` compresses, bounded (a decrypted value is authentic, but stay bounded anyway)."""
    if flags == _ZSTD:
        from graphckpt.savers._inflate import inflate  # needs zstandard, as writing did

        return inflate(data, limit=_MAX_PLAIN)
    inflater = zlib.decompressobj()
    out = inflater.decompress(data, _MAX_PLAIN)
    if inflater.unconsumed_tail or not inflater.eof:
        raise ValueError("a truncated or oversized zlib stream")
    return out
