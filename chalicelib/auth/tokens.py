"""Bearer tokens: HS256 JWTs locally. Users are scoped to a workspace, agents to one session."""
from __future__ import annotations

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


def verify(token: str, secret: str) -> Caller:
    """Raises Unauthorized for anything but a valid, unexpired token with a known role and scope."""
    if token.lower().startswith("bearer "):
        token = token[7:].strip()
    try:
        claims = jwt.decode(token, secret, algorithms=["HS256"], options={"require": ["exp", "sub", "role"]})
    except jwt.PyJWTError as exc:
        raise Unauthorized(f"invalid token: {exc}") from exc
    role, workspace = claims.get("role"), claims.get("workspace_id")
    if role not in ROLES or not isinstance(workspace, str) or not workspace:
        raise Unauthorized("token lacks a role or workspace")
    session_id = claims.get("session_id")
    if role == "agent" and not session_id:
        raise Unauthorized("agent token lacks a session")
    return Caller(sub=str(claims["sub"]), role=role, workspace_id=workspace, session_id=session_id)
