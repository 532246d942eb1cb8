"""Users are the user pool's: a Cognito access token (RS256, the pool's JWKS) to a caller.

The API takes the *access* token: it is the token Cognito issues for calling APIs (`token_use: access`, the
app client in `client_id`, the user's groups in `cognito:groups`); the ID token describes the user to the
client and is refused here. The workspace is the user's one `workspace:<id>` group: groups are set only by an
administrator and are in the access token as issued, where a custom attribute would be in the ID token only
(without a Lambda trigger) and writable by the user unless every app client is configured to forbid it.
"""
from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jwt
from jwt.api_jws import PyJWS

from ..domain.errors import Unauthorized
from .fetched import Fetched
from .rs256 import RS256, PublicKey, public_key
from .tokens import DEFAULT_MAX_LIFETIME, Caller, check_lifetime, claim

WORKSPACE_GROUP = "workspace:"
JWKS_MAX_AGE = 24 * 3600  # Cognito rotates its keys rarely; an unknown kid refetches sooner
JWKS_MIN_INTERVAL = 60.0
JWKS_TIMEOUT = 5.0
_JWS = PyJWS(algorithms=[])  # RS256 alone, always ours: whatever else PyJWT knows is off the list
_JWS.register_algorithm("RS256", RS256())


@dataclass(frozen=True)
class UserPool:
    pool_id: str
    client_id: str
    jwks_url: str  # the pool's own URL in AWS; the emulator's locally

    @property
    def region(self) -> str:
        return self.pool_id.split("_", 1)[0]

    @property
    def issuer(self) -> str:
        return f"https://cognito-idp.{self.region}.amazonaws.com/{self.pool_id}"

    @staticmethod
    def at(pool_id: str, client_id: str, endpoint: str | None = None) -> UserPool:
        """The pool `pool_id`, its keys at `endpoint` (an emulator) or at Cognito's issuer URL."""
        base = endpoint.rstrip("/") if endpoint else f"https://cognito-idp.{pool_id.split('_', 1)[0]}.amazonaws.com"
        return UserPool(pool_id, client_id, f"{base}/{pool_id}/.well-known/jwks.json")


def workspace_of(groups: Any) -> str:
    """The workspace named by the user's one workspace group. None, or several, is no workspace."""
    names = [g[len(WORKSPACE_GROUP):] for g in groups if isinstance(g, str) and g.startswith(WORKSPACE_GROUP)] \
        if isinstance(groups, list) else []
    if len(names) != 1:
        raise Unauthorized("the user belongs to no workspace" if not names else "the user is in several workspaces")
    return claim({"workspace_id": names[0]}, "workspace_id")


def parse_jwks(document: Any) -> dict[str, PublicKey]:
    """The RS256 signing keys of a JWKS by kid; other keys are ignored."""
    keys: dict[str, PublicKey] = {}
    for jwk in document.get("keys", []) if isinstance(document, dict) else []:
        try:
            if isinstance(jwk, dict) and isinstance(jwk.get("kid"), str):
                keys[jwk["kid"]] = public_key(jwk)
        except ValueError:
            continue
    return keys


def fetch_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=JWKS_TIMEOUT) as resp:  # noqa: S310 (an https or emulator URL)
        return json.loads(resp.read())


class PoolVerifier:
    def __init__(self, pool: UserPool, *, fetch: Callable[[str], Any] = fetch_json,
                 max_lifetime: int = DEFAULT_MAX_LIFETIME) -> None:
        self.pool = pool
        self.max_lifetime = max_lifetime
        self.keys = Fetched(lambda: parse_jwks(fetch(pool.jwks_url)), max_age=JWKS_MAX_AGE,
                            min_interval=JWKS_MIN_INTERVAL)

    def verify(self, token: str, now: float | None = None) -> Caller:
        """Raises Unauthorized unless `token` is an unexpired access token this pool issued to our app client
        for a user with one workspace."""
        try:
            kid = jwt.get_unverified_header(token).get("kid")
        except jwt.PyJWTError as exc:
            raise Unauthorized(f"invalid token: {exc}") from exc
        if not isinstance(kid, str):
            raise Unauthorized("token has no key id")
        key = self.keys.get().get(kid) or self.keys.get(unknown=True).get(kid)
        if key is None:
            raise Unauthorized("token is signed by a key the user pool does not have")
        try:
            payload = _JWS.decode_complete(token, key, algorithms=["RS256"])["payload"]  # type: ignore[arg-type]
            claims = json.loads(payload)
        except (jwt.PyJWTError, ValueError, RecursionError) as exc:
            raise Unauthorized(f"invalid token: {exc}") from exc
        if not isinstance(claims, dict):
            raise Unauthorized("invalid token: the payload is not an object")
        if claims.get("iss") != self.pool.issuer:
            raise Unauthorized("token is from another issuer")
        if claims.get("token_use") != "access":
            raise Unauthorized("an access token is required")
        if claims.get("client_id") != self.pool.client_id:
            raise Unauthorized("token was issued to another client")
        check_lifetime(claims, self.max_lifetime, time.time() if now is None else now)
        return Caller(sub=claim(claims, "sub"), role="user", workspace_id=workspace_of(claims.get("cognito:groups")))
