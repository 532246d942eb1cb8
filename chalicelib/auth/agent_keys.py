"""Agent tokens: session-scoped, minted by Clarify at dispatch, signed (HS256) with a key of a keyring kept in the
secret store and named by the token's `kid`.

The secret is one JSON object: `current` names the signing key, every other member is a key id and its key,
e.g. `{"current": "k2", "k1": "...", "k2": "..."}` (this flat shape is what CloudFormation's generated secret
string makes). A rotation adds a new key and makes it current while the previous one stays valid
(`rotated`); a container reads the secret once, again when it is older than KEYRING_MAX_AGE, and on a kid it
does not know, so a new key is honoured everywhere before any old one is dropped.
"""
from __future__ import annotations

import json
import re
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ..domain.errors import Unauthorized
from .fetched import Fetched
from .tokens import DEFAULT_MAX_LIFETIME, Caller, mint, verify_signed

CURRENT = "current"
KID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
MIN_KEY = 32
KEYRING_MAX_AGE = 15 * 60.0
KEYRING_MIN_INTERVAL = 30.0


@dataclass(frozen=True)
class Keyring:
    current: str
    keys: Mapping[str, str]

    @staticmethod
    def parse(text: str) -> Keyring:
        """Raises ValueError naming what is wrong with the secret."""
        doc = json.loads(text)
        if not isinstance(doc, dict):
            raise ValueError("the agent keyring must be a JSON object")
        keys = {kid: key for kid, key in doc.items() if kid != CURRENT}
        for kid, key in keys.items():
            if not KID.match(kid) or not isinstance(key, str) or len(key) < MIN_KEY:
                raise ValueError(f"agent key {kid!r}: ids match {KID.pattern}, keys have {MIN_KEY}+ characters")
        current = doc.get(CURRENT)
        if not isinstance(current, str) or current not in keys:
            raise ValueError("the agent keyring's `current` must name one of its keys")
        return Keyring(current, keys)

    def dumps(self) -> str:
        return json.dumps({CURRENT: self.current, **self.keys}, sort_keys=True)


def new_key() -> str:
    return secrets.token_urlsafe(48)


def new_keyring() -> Keyring:
    return Keyring("k1", {"k1": new_key()})


def rotated(ring: Keyring, now: float | None = None) -> Keyring:
    """A new current key; the previous current key stays valid, any older one is dropped."""
    kid = f"k{int(time.time() if now is None else now)}"
    if kid in ring.keys:
        raise ValueError(f"key {kid} already exists: rotate again in a second")
    return Keyring(kid, {ring.current: ring.keys[ring.current], kid: new_key()})


class AgentKeys:
    def __init__(self, load: Callable[[], str], *, max_lifetime: int = DEFAULT_MAX_LIFETIME) -> None:
        self.max_lifetime = max_lifetime
        self.ring = Fetched(lambda: Keyring.parse(load()), max_age=KEYRING_MAX_AGE,
                            min_interval=KEYRING_MIN_INTERVAL)

    def mint(self, workspace_id: str, session_id: str) -> str:
        ring = self.ring.get()
        return mint(ring.keys[ring.current], sub=f"agent:{session_id}", role="agent", workspace_id=workspace_id,
                    session_id=session_id, kid=ring.current)

    def verify(self, token: str, kid: str, now: float | None = None) -> Caller:
        key = self.ring.get().keys.get(kid) or self.ring.get(unknown=True).keys.get(kid)
        if key is None:
            raise Unauthorized("token is signed by an unknown key")
        caller = verify_signed(token, key, max_lifetime=self.max_lifetime, now=now)
        if caller.role != "agent" or caller.session_id is None:
            raise Unauthorized("an agent key signs agent tokens only")
        return caller


def secret_store(secret_id: str) -> Callable[[], str]:
    """Reads the keyring from Secrets Manager (the emulator's locally)."""
    def load() -> str:
        from .. import aws
        return str(aws.client("secretsmanager").get_secret_value(SecretId=secret_id)["SecretString"])
    return load
