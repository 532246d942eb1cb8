"""P-256 for Web Push, through python-ecdsa: key pairs, ECDH (RFC 8291's shared secret) and ES256 signatures
with RFC 6979 nonces (VAPID's JWT), in the shapes the push code keeps them: a private key is its scalar (an int,
as the VAPID secret stores it) and a public key its 65-byte uncompressed point (as RFC 8291 and the browser's
`p256dh` carry it).

python-ecdsa is pure Python, so infra/vendor.py can ship it where `cryptography` (compiled) cannot. Like any
pure-Python arithmetic it is not constant-time: the VAPID key signs one short token per push service and per
twelve hours (vapid.py caches it) and each message's ECDH key is used once, so there is little timing to observe.
"""
from __future__ import annotations

import hashlib
import secrets

from ecdsa import ECDH, NIST256p, SigningKey, VerifyingKey
from ecdsa.errors import MalformedPointError
from ecdsa.util import sigencode_string

N: int = NIST256p.order


def _signing_key(private: int) -> SigningKey:
    return SigningKey.from_secret_exponent(private, curve=NIST256p, hashfunc=hashlib.sha256)


def decode_point(data: bytes) -> VerifyingKey:
    """An uncompressed P-256 point; ValueError unless it is 65 bytes, 0x04-prefixed and on the curve."""
    if len(data) != 65 or data[0] != 4:
        raise ValueError("a P-256 public key is 65 bytes, uncompressed (0x04 || X || Y)")
    try:
        return VerifyingKey.from_string(data, curve=NIST256p, valid_encodings=("uncompressed",))
    except MalformedPointError:
        raise ValueError("the public key is not a point of P-256") from None


def new_private_key() -> int:
    return secrets.randbelow(N - 1) + 1


def public_key(private: int) -> bytes:
    return bytes(_signing_key(private).get_verifying_key().to_string("uncompressed"))


def shared_secret(private: int, peer: bytes) -> bytes:
    """ECDH: the X coordinate of private * peer (32 bytes). Raises ValueError for a bad peer key."""
    ecdh = ECDH(curve=NIST256p, private_key=_signing_key(private), public_key=decode_point(peer))
    return bytes(ecdh.generate_sharedsecret_bytes())


def sign_es256(private: int, message: bytes) -> bytes:
    """ECDSA P-256 / SHA-256 as JWS wants it: r || s, 32 bytes each, with the RFC 6979 nonce."""
    return bytes(_signing_key(private).sign_deterministic(message, hashfunc=hashlib.sha256,
                                                          sigencode=sigencode_string))
