"""P-256 in pure Python: key pairs, ECDH (RFC 8291's shared secret) and ES256 signatures (VAPID's JWT).

The Lambda package is vendored from pure-Python wheels only (infra/vendor.py), so `cryptography` cannot ship
(chalicelib/auth/rs256.py made the same choice). Big-integer arithmetic here is not constant-time: the VAPID key
signs one short token per push service and per twelve hours (vapid.py caches it) and each message's ECDH key is
used once, so there is little timing to observe; tests check every function against `cryptography`.
"""
from __future__ import annotations

import hashlib
import hmac
import secrets

P = 0xFFFFFFFF00000001000000000000000000000000FFFFFFFFFFFFFFFFFFFFFFFF
A = P - 3
B = 0x5AC635D8AA3A93E7B3EBBD55769886BC651D06B0CC53B0F63BCE3C3E27D2604B
N = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551
G = (0x6B17D1F2E12C4247F8BCE6E563A440F277037D812DEB33A0F4A13945D898C296,
     0x4FE342E2FE1A7F9B8EE7EB4A7C0F9E162BCE33576B315ECECBB6406837BF51F5)
Point = tuple[int, int] | None  # None: the point at infinity


def on_curve(point: Point) -> bool:
    if point is None:
        return False
    x, y = point
    return 0 <= x < P and 0 <= y < P and (y * y - (x * x * x + A * x + B)) % P == 0


def _add(p1: Point, p2: Point) -> Point:
    if p1 is None:
        return p2
    if p2 is None:
        return p1
    (x1, y1), (x2, y2) = p1, p2
    if x1 == x2:
        if (y1 + y2) % P == 0:
            return None
        slope = (3 * x1 * x1 + A) * pow(2 * y1, -1, P) % P
    else:
        slope = (y2 - y1) * pow(x2 - x1, -1, P) % P
    x3 = (slope * slope - x1 - x2) % P
    return x3, (slope * (x1 - x3) - y1) % P


def multiply(k: int, point: Point) -> Point:
    result: Point = None
    addend = point
    while k:
        if k & 1:
            result = _add(result, addend)
        addend = _add(addend, addend)
        k >>= 1
    return result


def encode_point(point: Point) -> bytes:
    """The uncompressed SEC 1 form: 0x04 || X || Y (65 bytes)."""
    assert point is not None
    return b"\x04" + point[0].to_bytes(32, "big") + point[1].to_bytes(32, "big")


def decode_point(data: bytes) -> tuple[int, int]:
    """An uncompressed P-256 point; ValueError unless it is 65 bytes, 0x04-prefixed and on the curve."""
    if len(data) != 65 or data[0] != 4:
        raise ValueError("a P-256 public key is 65 bytes, uncompressed (0x04 || X || Y)")
    point = int.from_bytes(data[1:33], "big"), int.from_bytes(data[33:], "big")
    if not on_curve(point):
        raise ValueError("the public key is not a point of P-256")
    return point


def new_private_key() -> int:
    return secrets.randbelow(N - 1) + 1


def public_key(private: int) -> bytes:
    return encode_point(multiply(private, G))


def shared_secret(private: int, peer: bytes) -> bytes:
    """ECDH: the X coordinate of private * peer (32 bytes). Raises ValueError for a bad peer key."""
    point = multiply(private, decode_point(peer))
    if point is None:
        raise ValueError("the shared point is at infinity")
    return point[0].to_bytes(32, "big")


def _rfc6979_k(private: int, digest: bytes) -> int:
    """The deterministic nonce of RFC 6979 §3.2 (HMAC-SHA256): no randomness to get wrong."""
    x, h1 = private.to_bytes(32, "big"), (int.from_bytes(digest, "big") % N).to_bytes(32, "big")
    v, k = b"\x01" * 32, b"\x00" * 32
    for marker in (b"\x00", b"\x01"):
        k = hmac.new(k, v + marker + x + h1, hashlib.sha256).digest()
        v = hmac.new(k, v, hashlib.sha256).digest()
    while True:
        v = hmac.new(k, v, hashlib.sha256).digest()
        candidate = int.from_bytes(v, "big")
        if 1 <= candidate < N:
            return candidate
        k = hmac.new(k, v + b"\x00", hashlib.sha256).digest()
        v = hmac.new(k, v, hashlib.sha256).digest()


def sign_es256(private: int, message: bytes) -> bytes:
    """ECDSA P-256 / SHA-256 as JWS wants it: r || s, 32 bytes each."""
    digest = hashlib.sha256(message).digest()
    z = int.from_bytes(digest, "big")
    k = _rfc6979_k(private, digest)
    while True:
        point = multiply(k, G)
        assert point is not None
        r = point[0] % N
        s = pow(k, -1, N) * (z + r * private) % N
        if r and s:
            return r.to_bytes(32, "big") + s.to_bytes(32, "big")
        k = k % (N - 1) + 1  # never reached in practice (probability ~2^-256)
