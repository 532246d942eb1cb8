"""Bearer tokens: HS256 JWTs locally. Users are scoped to a workspace, agents to one session."""
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
         ttl_seconds: int = 12 * 3600, now: float | None = None) -> str:
    issued = int(now if now is not None else time.time())
    claims: dict[str, Any] = {"sub": sub, "role": role, "workspace_id": workspace_id,
                              "iat": issued, "exp": issued + ttl_seconds}
    if session_id:
        claims["session_id"] = session_id
    return jwt.encode(claims, secret, algorithm="HS256")


SCHEME = re.compile(r"^[Bb][Ee][Aa][Rr][Ee][Rr] +(\S+)$")
MAX_CLAIM = 256
DEFAULT_MAX_LIFETIME = 24 * 3600
LEEWAY = 60  # seconds of clock skew tolerated in the lifetime checks (expiry itself has none)


def verify(header: str, secret: str, *, max_lifetime: int = DEFAULT_MAX_LIFETIME, now: float | None = None) -> Caller:
    """`Authorization: Bearer <JWT>` to a caller. Raises Unauthorized for anything but a well-formed, HS256-signed,
    unexpired token whose lifetime is at most `max_lifetime` seconds, with a known role and non-empty scope."""
    match = SCHEME.match(header or "")
    if not match:
        raise Unauthorized("the Authorization header must be `Bearer <token>`")
    try:
        # HS256 only: `alg: none` and every other algorithm are refused by the allow-list.
        claims = jwt.decode(match.group(1), secret, algorithms=["HS256"],
                            options={"require": ["exp", "sub", "role", "workspace_id"]})
    except jwt.PyJWTError as exc:
        raise Unauthorized(f"invalid token: {exc}") from exc
    _check_lifetime(claims, max_lifetime, time.time() if now is None else now)
    sub, role, workspace = (_claim(claims, name) for name in ("sub", "role", "workspace_id"))
    if role not in ROLES:
        raise Unauthorized("token has an unknown role")
    session_id = _claim(claims, "session_id") if role == "agent" or "session_id" in claims else None
    return Caller(sub=sub, role=role, workspace_id=workspace, session_id=session_id)


def _claim(claims: Mapping[str, Any], name: str) -> str:
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


def _check_lifetime(claims: Mapping[str, Any], max_lifetime: int, now: float) -> None:
    exp, iat = _number(claims, "exp"), _number(claims, "iat")
    assert exp is not None  # required above
    if exp - now > max_lifetime + LEEWAY:
        raise Unauthorized("token expires too far in the future")
    if iat is not None and (iat > now + LEEWAY or exp - iat > max_lifetime):
        raise Unauthorized("token lifetime is longer than allowed")
