"""The deployment's VAPID key (RFC 8292): kept in the secret store, made on first use, and the token that
identifies Clarify to a push service.

The secret is one JSON object `{"private_key": <base64url 32-byte scalar>}`. The template creates it empty
(`{}`); the first function that needs the key makes one and stores it as a version with a fixed client request
token, so two containers racing to make it agree on the first one stored (the other's write is refused and it
reads the winner). Changing the key later invalidates every browser subscription (they were made for the old
public key): the web client subscribes again when it sees a new key.
"""
from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from . import ec

PRIVATE_KEY = "private_key"
FIRST_KEY_TOKEN = "clarify-vapid-first-key-0000000000000000"  # 32-64 characters, fixed: see the docstring
TOKEN_LIFETIME = 12 * 3600  # RFC 8292 §2: at most 24 hours
TOKEN_REUSE = 6 * 3600  # a cached token is reused while it has at least this long to live


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64url(text: str) -> bytes:
    """Base64url with or without padding; ValueError for anything else."""
    if not isinstance(text, str) or not text or any(c not in B64URL for c in text.rstrip("=")):
        raise ValueError("not base64url")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


B64URL = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def new_secret() -> str:
    return json.dumps({PRIVATE_KEY: b64url(ec.new_private_key().to_bytes(32, "big"))})


def parse_secret(text: str) -> int | None:
    """The private scalar, or None while the secret holds no key yet. ValueError for a malformed key."""
    doc = json.loads(text)
    if not isinstance(doc, dict):
        raise ValueError("the VAPID secret must be a JSON object")
    if doc.get(PRIVATE_KEY) is None:
        return None
    raw = unb64url(doc[PRIVATE_KEY])
    scalar = int.from_bytes(raw, "big")
    if len(raw) != 32 or not 1 <= scalar < ec.N:
        raise ValueError("the VAPID private key must be a 32-byte P-256 scalar")
    return scalar


@dataclass
class Vapid:
    """Signs the `Authorization: vapid t=..., k=...` header; one token per push service origin, reused."""

    private: int
    subject: str  # a mailto: or https: contact for the push service's operators
    clock: Callable[[], float] = time.time
    _tokens: dict[str, tuple[str, float]] = field(default_factory=dict)

    @property
    def public_key(self) -> str:
        """base64url of the uncompressed public point: the browser's applicationServerKey."""
        return b64url(ec.public_key(self.private))

    def authorization(self, endpoint: str) -> str:
        parts = urlsplit(endpoint)
        audience = f"{parts.scheme}://{parts.netloc}"
        now = self.clock()
        cached = self._tokens.get(audience)
        if cached is None or cached[1] - now < TOKEN_REUSE:
            expires = int(now) + TOKEN_LIFETIME
            header = b64url(json.dumps({"typ": "JWT", "alg": "ES256"}, separators=(",", ":")).encode())
            claims = b64url(json.dumps({"aud": audience, "exp": expires, "sub": self.subject},
                                       separators=(",", ":")).encode())
            signing_input = f"{header}.{claims}".encode()
            cached = (f"{header}.{claims}.{b64url(ec.sign_es256(self.private, signing_input))}", float(expires))
            self._tokens[audience] = cached
        return f"vapid t={cached[0]}, k={self.public_key}"


def load_or_make(read: Callable[[], str], write_first: Callable[[str], bool]) -> int:
    """The stored key; when the secret holds none yet, make one and store it as the first key (`write_first`
    returns False when another writer's first key won), then read again."""
    scalar = parse_secret(read())
    if scalar is not None:
        return scalar
    write_first(new_secret())
    scalar = parse_secret(read())
    if scalar is None:
        raise RuntimeError("the VAPID secret still holds no key after storing one")
    return scalar


def secret_store(secret_id: str, client: Callable[[], object] | None = None) -> tuple[Callable[[], str],
                                                                                       Callable[[str], bool]]:
    """Read and first-write functions over Secrets Manager (the emulator's locally)."""
    def sm() -> object:
        if client is not None:
            return client()
        from .. import aws
        return aws.client("secretsmanager")

    def read() -> str:
        return str(sm().get_secret_value(SecretId=secret_id)["SecretString"])  # type: ignore[attr-defined]

    def write_first(text: str) -> bool:
        from botocore.exceptions import ClientError
        try:
            sm().put_secret_value(SecretId=secret_id, SecretString=text,  # type: ignore[attr-defined]
                                  ClientRequestToken=FIRST_KEY_TOKEN)
            return True
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "ResourceExistsException":
                return False
            raise
    return read, write_first
