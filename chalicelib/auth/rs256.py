"""RS256 verification in pure Python, for PyJWT.

PyJWT verifies RS256 through `cryptography`, a compiled library: the Lambda package is vendored offline from
pure-Python wheels only (infra/vendor.py), so it cannot ship. Verifying (not signing) an RSASSA-PKCS1-v1_5
signature needs one modular exponentiation and a comparison: this is RFC 8017 §8.2.2, with the encoded message
*built* from the hash and compared whole, never parsed out of the signature (parsing is where the known forgery
attacks on lenient verifiers live). The same code runs in tests and in Lambda.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

from jwt.algorithms import Algorithm

# DER of DigestInfo{sha256} up to the digest (RFC 8017 §9.2 note 1).
SHA256_PREFIX = bytes.fromhex("3031300d060960864801650304020105000420")
MIN_BITS = 2048


@dataclass(frozen=True)
class PublicKey:
    n: int
    e: int

    @property
    def size(self) -> int:
        return (self.n.bit_length() + 7) // 8


def _uint(value: Any) -> int:
    if not isinstance(value, str) or not value:
        raise ValueError("an RSA key parameter must be a non-empty base64url string")
    return int.from_bytes(base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)), "big")


def public_key(jwk: Mapping[str, Any]) -> PublicKey:
    """An RS256 signing key from a JWK. Raises ValueError for anything else (another type, use or algorithm)."""
    if jwk.get("kty") != "RSA" or jwk.get("alg", "RS256") != "RS256" or jwk.get("use", "sig") != "sig":
        raise ValueError("not an RS256 signing key")
    key = PublicKey(_uint(jwk.get("n")), _uint(jwk.get("e")))
    if key.n.bit_length() < MIN_BITS or key.e < 3 or key.e % 2 == 0:
        raise ValueError("RSA key too small or with a bad exponent")
    return key


def verify(key: PublicKey, message: bytes, signature: bytes) -> bool:
    k = key.size
    if len(signature) != k:
        return False
    s = int.from_bytes(signature, "big")
    if s >= key.n:
        return False
    encoded = pow(s, key.e, key.n).to_bytes(k, "big")
    t = SHA256_PREFIX + hashlib.sha256(message).digest()
    expected = b"\x00\x01" + b"\xff" * (k - len(t) - 3) + b"\x00" + t
    return hmac.compare_digest(encoded, expected)


class RS256(Algorithm):
    """PyJWT's Algorithm interface over `verify`; keys are `PublicKey`s (never strings: no HS/RS confusion)."""

    def prepare_key(self, key: Any) -> PublicKey:
        if not isinstance(key, PublicKey):
            raise TypeError("RS256 verifies with a PublicKey from the pool's JWKS")
        return key

    def sign(self, msg: bytes, key: Any) -> NoReturn:
        raise NotImplementedError("Clarify never signs with RS256")

    def verify(self, msg: bytes, key: Any, sig: bytes) -> bool:
        return verify(self.prepare_key(key), msg, sig)

    @staticmethod
    def to_jwk(key_obj: Any, as_dict: bool = False) -> NoReturn:  # type: ignore[override]
        raise NotImplementedError

    @staticmethod
    def from_jwk(jwk: Any) -> PublicKey:
        return public_key(jwk)
