"""Authentication and scope over real HTTP, for every route of the app (enumerated, so new routes are covered).

No token or a bad one is 401; anything outside the caller's scope is 404 exactly like a missing id, and a
refused request writes nothing. Path parameters are filled with ids of real objects.
"""
from __future__ import annotations

import os
import re
import time
import uuid
import warnings
from typing import Any

import jwt
import pytest

from chalicelib import aws, bootstrap
from chalicelib.auth.tokens import mint
from infra.identity import client_properties
from scripts.local.identity import add_user, create_pool, new_password, sign_in
from scripts.local.sim_agent import SimAgent
from scripts.local.stack import LocalStack
from tests.support import pool
from tests.support.flow import ApiClient
from tests.support.routes import (
    DELETE_TASK,
    PUBLIC,
    V1,
    Route,
    World,
    agent_routes,
    all_routes,
    authorized_routes,
    build_world,
    call,
    error_code,
    listing,
    missing_like,
    snapshot,
    user_routes,
)


@pytest.fixture
def world(stack: LocalStack, user: ApiClient, sim: SimAgent) -> World:
    return build_world(stack, user, sim)


# ------------------------------------------------------------------ public routes
def test_route_table__public_api_routes__only_health_openapi_and_sign_in_config(stack: LocalStack) -> None:
    public = set(all_routes()) - set(authorized_routes())
    assert {(m, p) for m, p in public if p.startswith(V1 + "/")} == PUBLIC
    # Outside the API only static files (the web client) may be public: they can change nothing.
    assert {m for m, p in public if not p.startswith(V1 + "/")} <= {"GET"}
    for route in sorted(PUBLIC):
        resp = call(stack, route, {})
        assert resp.status_code == 200, (route, resp.status_code, resp.text)



# ------------------------------------------------------------------ 404: outside the caller's scope
def test_user_routes__other_workspace_ids__404_identical_to_missing(stack: LocalStack, world: World) -> None:
    outsider = stack.user_token(workspace="ws-2", sub="user-2")
    scoped = [r for r in user_routes() if re.search(r"{\w+}", r[1])]
    assert scoped, "no user route takes an id?"
    before = snapshot()
    wrong: list[tuple[Any, ...]] = []
    for route in scoped:
        theirs = call(stack, route, world.a, token=outsider)
        missing = call(stack, route, {k: missing_like(v) for k, v in world.a.items()}, token=outsider)
        if theirs.status_code != 404 or error_code(theirs) != "not_found":
            wrong.append((route, "other workspace", theirs.status_code, theirs.text[:200]))
        if (theirs.status_code, theirs.content) != (missing.status_code, missing.content):
            wrong.append((route, "differs from missing", theirs.text[:200], missing.text[:200]))
    assert not wrong, listing(wrong)
    assert snapshot() == before, "a refused request changed ws-1's data"
    # The same requests from the owner reach the objects, so the 404s above came from scope (deleting the task
    # goes last: everything else is reached through it).
    owner = [(r, call(stack, r, world.a, token=stack.user_token()).status_code)
             for r in sorted(scoped, key=lambda r: r == DELETE_TASK)]
    assert [(r, s) for r, s in owner if s == 404] == []


def test_list_routes__other_workspace__sees_none_of_its_tasks_or_events(stack: LocalStack, user: ApiClient,
                                                                        world: World) -> None:
    outsider = ApiClient(stack.url, stack.user_token(workspace="ws-2", sub="user-2"))
    assert stack.pump is not None
    stack.pump.drain()  # ws-1's changes become events
    assert [t["id"] for t in user.get("/tasks").json()["tasks"]] == [world.a["task_id"]]
    assert user.get("/events").json()["events"], "ws-1 has events (control)"
    assert outsider.get("/tasks").json()["tasks"] == []
    assert outsider.get("/events").json()["events"] == []


# ------------------------------------------------------------------ the authorization matrix
# Every authorized route × every kind of wrong credential, generated from the route table: 401 for a
# credential that is not a valid token, 404 for a valid token whose scope does not reach the target. Each
# cell is one real request at session A's objects (or session B's, for another session's agent).
Cell = tuple[str, Route, int]  # (credential kind, route, expected status)


def _claims(**changes: Any) -> dict[str, Any]:
    now = int(time.time())
    claims: dict[str, Any] = {"sub": "user-1", "role": "user", "workspace_id": "ws-1", "iat": now, "exp": now + 3600}
    claims.update(changes)
    return {k: v for k, v in claims.items() if v is not DROP}


DROP = object()


def _jwt(claims: dict[str, Any], key: str | None = None, algorithm: str = "HS256") -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # short keys on purpose: these tokens must be refused anyway
        return jwt.encode(claims, bootstrap.auth_secret() if key is None else key, algorithm=algorithm)


def unauthenticated() -> dict[str, str | None]:
    """Credential kind -> Authorization header (None: no header). None of these is a valid token."""
    secret = bootstrap.auth_secret()
    now = time.time()
    good = mint(secret, sub="user-1", role="user", workspace_id="ws-1")
    bearer = {
        "not a jwt": "garbage",
        "tampered signature": good[:-4] + ("AAAA" if not good.endswith("AAAA") else "BBBB"),
        "wrong signature (other secret)": _jwt(_claims(), "another-secret-" + "x" * 32),
        "alg none": _jwt(_claims(), "", "none"),
        "alg HS512": _jwt(_claims(), secret, "HS512"),
        "expired (user)": mint(secret, sub="user-1", role="user", workspace_id="ws-1", ttl_seconds=-10),
        "expired (agent)": _jwt(_claims(role="agent", session_id="x", sub="agent:x", exp=int(now) - 10)),
        "minted a day ago": mint(secret, sub="user-1", role="user", workspace_id="ws-1", now=now - 86_400),
        "missing sub": _jwt(_claims(sub=DROP)),
        "empty sub": _jwt(_claims(sub="")),
        "sub not a string": _jwt(_claims(sub=7)),
        "missing workspace_id": _jwt(_claims(workspace_id=DROP)),
        "empty workspace_id": _jwt(_claims(workspace_id="")),
        "workspace_id not a string": _jwt(_claims(workspace_id=["ws-1"])),
        "missing role": _jwt(_claims(role=DROP)),
        "unknown role": _jwt(_claims(role="admin")),
        "missing exp": _jwt(_claims(exp=DROP)),
        "exp a numeric string": _jwt(_claims(exp=str(int(now) + 3600))),
        "exp 2**1030": _jwt(_claims(exp=2**1030)),
        "lifetime over the maximum": _jwt(_claims(exp=int(now) + 40 * 86_400)),
        "exp too far ahead (no iat)": _jwt(_claims(iat=DROP, exp=int(now) + 40 * 86_400)),
        "agent without session": _jwt(_claims(role="agent")),
        "agent with empty session": _jwt(_claims(role="agent", session_id="")),
    }
    headers: dict[str, str | None] = {"no token": None, "empty bearer": "Bearer ", "basic scheme":
                                      "Basic dXNlcjpwYXNz", "token without the Bearer prefix": good}
    headers.update({kind: f"Bearer {token}" for kind, token in bearer.items()})
    return headers


def pool_unauthenticated(stack: LocalStack) -> dict[str, str | None]:
    """Credential kind -> Authorization header for the user pool's tokens that must be refused: real sign-ins
    at the emulator's Cognito where one can make the token, tokens signed with the pool's own key otherwise."""
    cognito = aws.client("cognito-idp", endpoint_url=stack.endpoint)
    pool_id = os.environ["CLARIFY_USER_POOL_ID"]
    other_pool, other_pool_client = create_pool(cognito, f"other-{uuid.uuid4().hex[:6]}")
    email, password = f"{uuid.uuid4().hex[:8]}@example.com", new_password()
    add_user(cognito, other_pool, email, "ws-1", password=password)
    from_other_pool = sign_in(cognito, other_pool_client, email, password)
    other_client = cognito.create_user_pool_client(UserPoolId=pool_id, **{**client_properties(),
                                                                          "ClientName": "other"})
    email, password = stack.pool_user("ws-1")
    to_other_client = sign_in(cognito, other_client["UserPoolClient"]["ClientId"], email, password)
    own = stack.pool_tokens("ws-1")
    nowhere = cognito.admin_create_user(UserPoolId=pool_id, Username=f"{uuid.uuid4().hex[:8]}@example.com",
                                        MessageAction="SUPPRESS")["User"]["Username"]
    cognito.admin_set_user_password(UserPoolId=pool_id, Username=nowhere, Password=(pw := new_password()),
                                    Permanent=True)
    claims = pool.access_claims()
    now = int(time.time())
    good = pool.sign(claims)
    head, payload, signature = good.split(".")
    tokens = {
        "pool: another pool's access token": from_other_pool["AccessToken"],
        "pool: an ID token (the API takes access tokens)": own["IdToken"],
        "pool: a refresh token": own["RefreshToken"],
        "pool: access token of another app client": to_other_client["AccessToken"],
        "pool: user in no workspace": sign_in(cognito, os.environ["CLARIFY_USER_POOL_CLIENT_ID"], nowhere,
                                              pw)["AccessToken"],
        "pool: user in two workspaces": pool.sign(pool.access_claims(**{"cognito:groups": ["workspace:ws-1",
                                                                                          "workspace:ws-2"]})),
        "pool: expired": pool.sign(pool.access_claims(iat=now - 7200, exp=now - 10)),
        "pool: no exp": pool.sign(pool.access_claims(exp=None)),
        "pool: exp 2**1030": pool.sign(pool.access_claims(exp=2**1030)),
        "pool: token_use id with client_id": pool.sign(pool.access_claims(token_use="id")),
        "pool: alg none": pool.sign(claims, algorithm="none", key=None),
        "pool: HS256 keyed with the pool's public key (kid)": pool.hs256_with_public_key(claims),
        "pool: HS256 keyed with the pool's public key (no kid)": pool.hs256_with_public_key(claims, kid=None),
        "pool: RS512 header": pool.sign(claims, algorithm="RS512"),
        "pool: tampered kid": pool.with_kid(good, "another-key"),
        "pool: no kid": pool.with_kid(good, ""),
        "pool: tampered workspace": ".".join([head, pool.sign(pool.access_claims("ws-2")).split(".")[1],
                                              signature]),
        "agent key: a user token signed with an agent key": _keyring_token(role="user", session_id=None),
        "agent key: unknown kid": _keyring_token(kid="k-unknown"),
    }
    return {kind: f"Bearer {token}" for kind, token in tokens.items()}


def _keyring_token(*, role: str = "agent", session_id: str | None = "x", kid: str | None = None) -> str:
    """A token signed with the stage's current agent key (as dispatch mints them), changed as asked."""
    agents = bootstrap.authenticator().agents
    assert agents is not None
    ring = agents.ring.get()
    return mint(ring.keys[ring.current], sub="agent:x", role=role, workspace_id="ws-1", session_id=session_id,
                kid=kid or ring.current)


def matrix(stack: LocalStack, world: World) -> list[tuple[Cell, dict[str, str], dict[str, str]]]:
    """Every cell: (kind, route, expected status), the headers to send and the ids to aim at."""
    cells: list[tuple[Cell, dict[str, str], dict[str, str]]] = []
    for kind, header in {**unauthenticated(), **pool_unauthenticated(stack)}.items():
        sent = {"Authorization": header} if header is not None else {}
        cells += [((kind, route, 401), sent, world.a) for route in authorized_routes()]
    outsider = stack.user_token(workspace="ws-2", sub="user-2")
    pool_outsider = stack.pool_tokens("ws-2")["AccessToken"]
    user = stack.user_token()
    pool_user = stack.pool_tokens("ws-1")["AccessToken"]

    def bearer(token: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}

    scoped = [r for r in authorized_routes() if re.search(r"{\w+}", r[1])]
    cells += [(("other workspace's user", r, 404), bearer(outsider), world.a) for r in scoped]
    cells += [(("other workspace's pool user", r, 404), bearer(pool_outsider), world.a) for r in scoped]
    cells += [(("agent token on a user route", r, 404), bearer(world.agent_a), world.a) for r in user_routes()]
    cells += [(("keyring agent token on a user route", r, 404), bearer(world.keyring_a), world.a)
              for r in user_routes()]
    cells += [(("user token on an agent route", r, 404), bearer(user), world.a) for r in agent_routes()]
    cells += [(("pool user's token on an agent route", r, 404), bearer(pool_user), world.a) for r in agent_routes()]
    cells += [(("another session's agent", r, 404), bearer(world.agent_a), world.b) for r in agent_routes()]
    cells += [(("another session's keyring agent", r, 404), bearer(world.keyring_a), world.b)
              for r in agent_routes()]
    return cells


def test_route_table__authorization_matrix__401_or_404_and_nothing_changes(stack: LocalStack,
                                                                           world: World) -> None:
    cells = matrix(stack, world)
    kinds = {kind for (kind, _, _), _, _ in cells}
    assert len(kinds) == 31 + 19 + 4 and all(kind for kind in kinds)  # + pool tokens, + 404 kinds
    before = snapshot()
    wrong = []
    for (kind, route, expected), headers, ids in cells:
        resp = call(stack, route, ids, headers=headers)
        code = "unauthorized" if expected == 401 else "not_found"
        if resp.status_code != expected or error_code(resp) != code:
            wrong.append((kind, route, resp.status_code, resp.text[:160]))
    print(f"\nauthorization matrix: {len(cells)} cells ({len(kinds)} credential kinds x routes)")
    assert not wrong, listing(wrong)
    # The targets read back exactly as before: no refused request wrote anything anywhere in ws-1.
    assert snapshot() == before
    # The owners reach the same targets with the same requests, so the 404s above came from scope.
    # The owners here are a pool user of ws-1 and the keyring's agent of session B, as in production.
    owners = [(r, call(stack, r, world.b, token=world.keyring_b).status_code) for r in agent_routes()]
    # A push device is its user's own, not the workspace's: its owner is the user who registered it.
    owners += [(r, call(stack, r, world.a, token=stack.user_token() if "{device_id}" in r[1]
                        else stack.pool_tokens("ws-1")["AccessToken"]).status_code)
               for r in sorted(user_routes(), key=lambda r: r == DELETE_TASK)]
    assert [(r, s) for r, s in owners if s in (401, 404)] == []
