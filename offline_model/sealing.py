"""Encrypted reasoning for the offline stand-in: opaque, authenticated blobs.

Real providers return a reasoning item's ``encrypted_content`` when a request asks for
``include=["reasoning.encrypted_content"]``: the model's reasoning, encrypted with a key only
the provider holds, so a client that keeps its own history (``store=false``, or a stored
response that expired) can send the reasoning back without being able to read or alter it.
A blob that was changed is refused with a 400.

The stand-in does the same with the standard library only: the reasoning is encrypted with a
keystream of HMAC-SHA256 blocks (counter mode under a random nonce), then the version, the
reasoning item's id, the nonce and the ciphertext are authenticated with a second HMAC
(encrypt-then-MAC). The id is authenticated too, so a blob moved onto another reasoning item
fails like an edited one. This is not a vetted cipher and protects nothing of value; it makes
the blob as opaque and as tamper-evident as the real one, which is what clients must cope with.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
from typing import Any

__all__ = ["SealError", "open_sealed", "seal"]

_VERSION = b"\x01"
_NONCE_BYTES = 16
_TAG_BYTES = 32
_BLOCK = hashlib.sha256().digest_size


class SealError(ValueError):
    """A blob that was not sealed by this key for this item, or was changed since."""


def _subkey(secret: bytes, purpose: bytes) -> bytes:
    # Separate keys for encrypting and authenticating, both derived from the one secret.
    return hmac.new(secret, b"offline-reasoning/" + purpose, hashlib.sha256).digest()


def _keystream(key: bytes, nonce: bytes, length: int) -> bytes:
    blocks = (hmac.new(key, nonce + counter.to_bytes(4, "big"), hashlib.sha256).digest()
              for counter in range(-(-length // _BLOCK)))
    return b"".join(blocks)[:length]


def _tag(secret: bytes, item_id: str, nonce: bytes, ciphertext: bytes) -> bytes:
    message = _VERSION + item_id.encode() + b"\x00" + nonce + ciphertext
    return hmac.new(_subkey(secret, b"mac"), message, hashlib.sha256).digest()


def seal(secret: bytes, item_id: str, payload: dict[str, Any]) -> str:
    """Encrypt and authenticate ``payload`` for the reasoning item ``item_id``.

    Returns:
        URL-safe base64 text that reveals nothing of the payload but its rough length.
    """
    plaintext = json.dumps(payload, separators=(",", ":")).encode()
    nonce = os.urandom(_NONCE_BYTES)
    stream = _keystream(_subkey(secret, b"enc"), nonce, len(plaintext))
    ciphertext = bytes(a ^ b for a, b in zip(plaintext, stream, strict=True))
    blob = _VERSION + nonce + ciphertext + _tag(secret, item_id, nonce, ciphertext)
    return base64.urlsafe_b64encode(blob).decode()


def open_sealed(secret: bytes, item_id: str, blob: Any) -> dict[str, Any]:
    """The payload :func:`seal` sealed for ``item_id``.

    Raises:
        SealError: the blob is not text, not this format, was sealed for another item or
            with another key, or was changed in any byte.
    """
    if not isinstance(blob, str) or not blob:
        raise SealError("encrypted_content must be a non-empty string")
    try:
        raw = base64.urlsafe_b64decode(blob.encode("ascii"))
    except (ValueError, UnicodeEncodeError):
        raise SealError("encrypted_content is not valid base64") from None
    if len(raw) < 1 + _NONCE_BYTES + _TAG_BYTES or raw[:1] != _VERSION:
        raise SealError("encrypted_content is not an encrypted reasoning blob")
    nonce = raw[1:1 + _NONCE_BYTES]
    ciphertext, tag = raw[1 + _NONCE_BYTES:-_TAG_BYTES], raw[-_TAG_BYTES:]
    # Compared in constant time, and checked before anything is decrypted.
    if not hmac.compare_digest(tag, _tag(secret, item_id, nonce, ciphertext)):
        raise SealError("encrypted_content does not verify: it was changed, or it belongs to "
                        "another reasoning item or another server")
    stream = _keystream(_subkey(secret, b"enc"), nonce, len(ciphertext))
    payload = json.loads(bytes(a ^ b for a, b in zip(ciphertext, stream, strict=True)))
    if not isinstance(payload, dict):
        raise SealError("encrypted_content holds no reasoning")
    return payload
