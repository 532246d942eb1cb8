"""Bearer tokens: what the authorizer accepts, and that `mint` keeps producing tokens it accepts."""
from __future__ import annotations

import time
import warnings
from typing import Any

import jwt
import pytest

from chalicelib.auth.tokens import DEFAULT_MAX_LIFETIME, mint, verify
from chalicelib.domain.errors import Unauthorized

SECRET = "s" * 40
NOW = int(time.time())


def token(**changes: Any) -> str:
    claims: dict[str, Any] = {"sub": "user-1", "role": "user", "workspace_id": "ws-1", "iat": NOW, "exp": NOW + 600}
    claims.update(changes)
    claims = {k: v for k, v in claims.items() if v is not None}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return jwt.encode(claims, SECRET, algorithm="HS256")


def check(header: str, max_lifetime: int = DEFAULT_MAX_LIFETIME) -> Any:
    # PyJWT checks exp and iat against the real clock, so NOW is the real time at import.
    return verify(header, SECRET, max_lifetime=max_lifetime, now=NOW)


def test_mint__user_and_agent_tokens__verify() -> None:
    user = verify("Bearer " + mint(SECRET, sub="u", role="user", workspace_id="w"), SECRET)
    agent = verify("Bearer " + mint(SECRET, sub="agent:s", role="agent", workspace_id="w", session_id="s"), SECRET)
    assert (user.sub, user.role, user.workspace_id, user.session_id) == ("u", "user", "w", None)
    assert (agent.role, agent.session_id) == ("agent", "s")
    assert verify("bearer  " + mint(SECRET, sub="u", role="user", workspace_id="w"), SECRET).sub == "u"


@pytest.mark.parametrize("header", [
    mint(SECRET, sub="u", role="user", workspace_id="w"),  # no scheme at all
    "Token " + mint(SECRET, sub="u", role="user", workspace_id="w"),
    "Bearer",
    "",
])
def test_verify__without_the_bearer_scheme__unauthorized(header: str) -> None:
    with pytest.raises(Unauthorized):
        verify(header, SECRET)


@pytest.mark.parametrize(("what", "changes"), [
    ("empty sub", {"sub": ""}),
    ("blank sub", {"sub": "  "}),
    ("sub a number", {"sub": 5}),
    ("sub with a lone surrogate", {"sub": "u\ud800"}),
    ("sub with a control character", {"sub": "u\n1"}),
    ("sub too long", {"sub": "u" * 257}),
    ("empty workspace", {"workspace_id": ""}),
    ("workspace a list", {"workspace_id": ["w"]}),
    ("empty role", {"role": ""}),
    ("agent with an empty session", {"role": "agent", "session_id": ""}),
    ("agent with a numeric session", {"role": "agent", "session_id": 3}),
    ("exp a numeric string", {"exp": str(NOW + 600)}),
    ("iat a string", {"iat": str(NOW)}),
    ("exp a boolean", {"exp": True}),
    ("exp 2**1030 (overflowed float())", {"exp": 2**1030}),
    ("iat 2**1030", {"iat": 2**1030}),
    ("iat -2**1030", {"iat": -2**1030}),
    ("exp just past 2**53", {"exp": 2**53}),
])
def test_verify__malformed_claims__unauthorized(what: str, changes: dict[str, Any]) -> None:
    with pytest.raises(Unauthorized):
        check("Bearer " + token(**changes))


def test_verify__lifetime_over_the_maximum__unauthorized() -> None:
    assert check("Bearer " + token(exp=NOW + 3600), max_lifetime=3600).sub == "user-1"
    with pytest.raises(Unauthorized):
        check("Bearer " + token(exp=NOW + 3601), max_lifetime=3600)  # exp - iat too long
    with pytest.raises(Unauthorized):
        check("Bearer " + token(iat=None, exp=NOW + 7200), max_lifetime=3600)  # exp too far ahead of now
    with pytest.raises(Unauthorized):
        check("Bearer " + token(iat=NOW + 3600, exp=NOW + 3700))  # issued in the future


def test_verify__alg_none_and_other_algorithms__unauthorized() -> None:
    claims = {"sub": "u", "role": "user", "workspace_id": "w", "exp": int(time.time()) + 60}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        unsigned = jwt.encode(claims, None, algorithm="none")
        hs512 = jwt.encode(claims, SECRET, algorithm="HS512")
    for header in ("Bearer " + unsigned, "Bearer " + hs512):
        with pytest.raises(Unauthorized):
            verify(header, SECRET)
