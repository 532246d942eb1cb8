"""One Web Push message: the payload encrypted for one subscription (RFC 8291, `aes128gcm` of RFC 8188),
the VAPID authorization (RFC 8292) and the request to the subscription's push service (RFC 8030).

AES-128-GCM is tlslite-ng's pure-Python implementation (its TLS stack's own), for the reason ec.py gives."""
from __future__ import annotations

import hashlib
import hmac
import os
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from . import ec
from .vapid import Vapid, b64url

RECORD_SIZE = 4096
# A push service must accept 4096 bytes of body (RFC 8030 §7.2); the header takes 86 of them, the tag 16 and the
# padding delimiter 1.
MAX_PAYLOAD = RECORD_SIZE - 86 - 16 - 1
TIMEOUT = 5.0  # per request; infra/template.py gives the push function room for its retries


@dataclass(frozen=True)
class Target:
    """Where and for whom to encrypt: a subscription's endpoint and keys (raw bytes)."""

    endpoint: str
    p256dh: bytes  # the user agent's public key, 65 bytes uncompressed
    auth: bytes  # the 16-byte authentication secret


@dataclass(frozen=True)
class Outcome:
    status: int  # the push service's HTTP status; 0 when it could not be reached
    retry_after: float | None = None


def _hkdf(salt: bytes, ikm: bytes, info: bytes, length: int) -> bytes:
    prk = hmac.new(salt, ikm, hashlib.sha256).digest()
    return hmac.new(prk, info + b"\x01", hashlib.sha256).digest()[:length]  # one block: length <= 32


def encrypt(payload: bytes, p256dh: bytes, auth: bytes, *, salt: bytes | None = None,
            private: int | None = None) -> bytes:
    """The message body (RFC 8291 §4): header (salt, record size, our ephemeral public key) and one record.
    Raises ValueError for a payload over MAX_PAYLOAD or a bad subscription key."""
    if len(payload) > MAX_PAYLOAD:
        raise ValueError(f"a push payload is at most {MAX_PAYLOAD} bytes")
    private = private if private is not None else ec.new_private_key()
    salt = salt if salt is not None else os.urandom(16)
    sender = ec.public_key(private)
    secret = ec.shared_secret(private, p256dh)
    ikm = _hkdf(auth, secret, b"WebPush: info\x00" + p256dh + sender, 32)
    key = _hkdf(salt, ikm, b"Content-Encoding: aes128gcm\x00", 16)
    nonce = _hkdf(salt, ikm, b"Content-Encoding: nonce\x00", 12)
    header = salt + RECORD_SIZE.to_bytes(4, "big") + bytes([len(sender)]) + sender
    # Imported here: tlslite's package imports its whole TLS stack (~60 ms), which every function's cold start
    # would pay for the one function that pushes.
    from tlslite.utils import python_aesgcm
    return header + bytes(python_aesgcm.new(key).seal(nonce, payload + b"\x02", b""))  # one record, the last


def topic(key: str) -> str:
    """A `Topic` header (RFC 8030 §5.4: at most 32 base64url characters): a newer message with the same topic
    replaces one the push service still holds, so a repeated send cannot reach the device twice."""
    return b64url(hashlib.sha256(key.encode()).digest())[:32]


def request_headers(vapid: Vapid, target: Target, *, ttl: int, urgency: str, topic_key: str) -> dict[str, str]:
    return {"Authorization": vapid.authorization(target.endpoint), "Content-Encoding": "aes128gcm",
            "Content-Type": "application/octet-stream", "TTL": str(ttl), "Urgency": urgency,
            "Topic": topic(topic_key)}


Transport = Callable[[str, bytes, Mapping[str, str]], Outcome]


def http_transport(url: str, body: bytes, headers: Mapping[str, str]) -> Outcome:
    """POST to the push service; its status, and Retry-After (seconds) when it gives one."""
    request = urllib.request.Request(url, data=body, headers=dict(headers), method="POST")
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as resp:  # noqa: S310 (https; http only locally)
            return Outcome(resp.status)
    except urllib.error.HTTPError as exc:
        return Outcome(exc.code, _retry_after(exc.headers.get("Retry-After")))
    except (urllib.error.URLError, OSError):
        return Outcome(0)


def _retry_after(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None  # an HTTP date: the caller's own backoff applies
