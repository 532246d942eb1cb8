"""Callers and the tokens Clarify signs itself (HS256): agent tokens, and the local stage's development tokens.

Users are scoped to a workspace, agents to one session. Users' own tokens come from the user pool (pool.py);
identity.py decides which kind a request carries.
"""
from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jwt

from ..domain.errors import NotFound, Unauthorized

ROLES = ("user", "agent")


@dataclass(frozen=True)
class Caller:
    sub: str
    role: str
    workspace_id: str
    session_id: str | None = None

    def require_user(self) -> Caller:
        """Agents never see user routes: outside scope reads as missing."""
        if self.role != "user":
            raise NotFound("not found")
        return self

    def require_agent_for(self, session_id: str) -> Caller:
        if self.role != "agent" or self.session_id != session_id:
            raise NotFound("not found")
        return self

    def as_context(self) -> dict[str, str]:
        return {"role": self.role, "workspace_id": self.workspace_id, "session_id": self.session_id or ""}

    @staticmethod
    def from_context(principal: str, ctx: Mapping[str, Any]) -> Caller:
        return Caller(sub=principal, role=str(ctx.get("role", "")), workspace_id=str(ctx.get("workspace_id", "")),
                      session_id=str(ctx.get("session_id") or "") or None)


def mint(secret: str, *, sub: str, role: str, workspace_id: str, session_id: str | None = None,
         ttl_seconds: int = 12 * 3600, now: float | None = None, kid: str | None = None) -> str:
    """A signed token; `kid` names the keyring key that signed it (agent tokens), none for a development token."""
    issued = int(now if now is not None else time.time())
    claims: dict[str, Any] = {"sub": sub, "role": role, "workspace_id": workspace_id,
                              "iat": issued, "exp": issued + ttl_seconds}
    if session_id:
        claims["session_id"] = session_id
    return jwt.encode(claims, secret, algorithm="HS256", headers={"kid": kid} if kid else None)


SCHEME = re.compile(r"^[Bb][Ee][Aa][Rr][Ee][Rr] +(\S+)$")
MAX_CLAIM = 256
DEFAULT_MAX_LIFETIME = 24 * 3600
LEEWAY = 60  # seconds of clock skew tolerated in the lifetime checks (expiry itself has none)


def bearer_token(header: str) -> str:
    match = SCHEME.match(header or "")
    if not match:
        raise Unauthorized("the Authorization header must be `Bearer <token>`")
    return match.group(1)


def verify(header: str, secret: str, *, max_lifetime: int = DEFAULT_MAX_LIFETIME, now: float | None = None) -> Caller:
    """`Authorization: Bearer <JWT>` to a caller, for a token signed with `secret` (see `verify_signed`)."""
    return verify_signed(bearer_token(header), secret, max_lifetime=max_lifetime, now=now)


def verify_signed(token: str, secret: str, *, max_lifetime: int = DEFAULT_MAX_LIFETIME,
                  now: float | None = None) -> Caller:
    """Raises Unauthorized for anything but a well-formed, HS256-signed, unexpired token whose lifetime is at
    most `max_lifetime` seconds, with a known role and non-empty scope."""
    try:
        # HS256 only: `alg: none` and every other algorithm are refused by the allow-list.
        claims = jwt.decode(token, secret, algorithms=["HS256"],
                            options={"require": ["exp", "sub", "role", "workspace_id"]})
    except jwt.PyJWTError as exc:
        raise Unauthorized(f"invalid token: {exc}") from exc
    check_lifetime(claims, max_lifetime, time.time() if now is None else now)
    sub, role, workspace = (claim(claims, name) for name in ("sub", "role", "workspace_id"))
    if role not in ROLES:
        raise Unauthorized("token has an unknown role")
    session_id = claim(claims, "session_id") if role == "agent" or "session_id" in claims else None
    return Caller(sub=sub, role=role, workspace_id=workspace, session_id=session_id)


def claim(claims: Mapping[str, Any], name: str) -> str:
    """A scope claim: a non-empty, bounded string of printable characters (it becomes part of stored keys)."""
    value = claims.get(name)
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_CLAIM or not value.isprintable() \
            or any("\ud800" <= ch <= "\udfff" for ch in value):
        raise Unauthorized(f"token claim {name} must be a non-empty string")
    return value


MAX_TIME = 2**53 - 1  # a time claim beyond JSON's exact integers is no real time (2**1030 overflowed float())


def _number(claims: Mapping[str, Any], name: str) -> float | None:
    value = claims.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise Unauthorized(f"token claim {name} must be a number")  # PyJWT would accept "1700000000"
    if not -MAX_TIME <= value <= MAX_TIME:  # compared as given: int and float compare exactly, NaN fails
        raise Unauthorized(f"token claim {name} is out of range")
    return float(value)


def check_lifetime(claims: Mapping[str, Any], max_lifetime: int, now: float) -> None:
    """Expired (no leeway), issued in the future, or living longer than `max_lifetime`: Unauthorized."""
    exp, iat = _number(claims, "exp"), _number(claims, "iat")
    if exp is None:
        raise Unauthorized("token has no expiry")
    if exp <= now:
        raise Unauthorized("token has expired")
    if exp - now > max_lifetime + LEEWAY:
        raise Unauthorized("token expires too far in the future")
    if iat is not None and (iat > now + LEEWAY or exp - iat > max_lifetime):
        raise Unauthorized("token lifetime is longer than allowed")
