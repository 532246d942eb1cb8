"""Who is calling: the one definition, used by the authorizer in AWS and locally alike.

- RS256: a user, by the user pool's access token (pool.py).
- HS256 with a `kid`: an agent, by a token Clarify minted with a key of the agent keyring (agent_keys.py).
- HS256 without a `kid`: a development token signed with CLARIFY_AUTH_SECRET, on the local stage only.
Anything else is refused, so no token is ever checked against a key of another kind.
"""
from __future__ import annotations

from dataclasses import dataclass

import jwt

from ..domain.errors import Unauthorized
from .agent_keys import AgentKeys
from .pool import PoolVerifier
from .tokens import DEFAULT_MAX_LIFETIME, Caller, bearer_token, verify_signed

LOCAL_STAGE = "local"


@dataclass(frozen=True)
class Authenticator:
    users: PoolVerifier | None = None
    agents: AgentKeys | None = None
    dev_secret: str | None = None  # the local stage's only
    max_lifetime: int = DEFAULT_MAX_LIFETIME

    def caller(self, header: str, now: float | None = None) -> Caller:
        """`Authorization: Bearer <JWT>` to a caller; Unauthorized for anything this stage does not trust."""
        token = bearer_token(header)
        try:
            head = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise Unauthorized(f"invalid token: {exc}") from exc
        alg, kid = head.get("alg"), head.get("kid")
        if alg == "RS256" and self.users is not None:
            return self.users.verify(token, now)
        if alg == "HS256" and isinstance(kid, str) and self.agents is not None:
            return self.agents.verify(token, kid, now)
        if alg == "HS256" and kid is None and self.dev_secret:
            return verify_signed(token, self.dev_secret, max_lifetime=self.max_lifetime, now=now)
        raise Unauthorized("the token is of no kind this stage accepts")
