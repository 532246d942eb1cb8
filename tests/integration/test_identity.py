"""Identity against the emulator: the prod stage's authorizer over HTTP, the operators' commands on the
emulator's Cognito and Secrets Manager, and the agent token a dispatch really sends."""
from __future__ import annotations

import json
import os
import uuid
from dataclasses import replace

import pytest
import requests

from chalicelib import aws, bootstrap
from chalicelib.auth.agent_keys import AgentKeys, secret_store
from chalicelib.auth.pool import WORKSPACE_GROUP, PoolVerifier, UserPool
from scripts import clarify_ops as ops
from scripts.local.identity import sign_in
from scripts.local.sim_agent import SimAgent
from scripts.local.stack import LocalStack
from tests.support.flow import ApiClient
from tests.support.wait import DEADLINE


def run(*argv: str) -> tuple[int, list[str]]:
    lines: list[str] = []
    return ops.main(list(argv), out=lines.append), lines


def test_prod_stage__development_token_refused__pool_and_keyring_tokens_accepted(
        stack: LocalStack, sim: SimAgent, monkeypatch: pytest.MonkeyPatch) -> None:
    dev = ApiClient(stack.url, stack.user_token())
    assert dev.get("/tasks").status_code == 200  # the local stage takes it
    config = requests.get(f"{stack.url}/api/v1/auth/config", timeout=30).json()
    assert config == {"development_tokens": True, "user_pool": {
        "client_id": os.environ["CLARIFY_USER_POOL_CLIENT_ID"], "region": "us-east-1", "endpoint": stack.endpoint}}
    monkeypatch.setenv("CLARIFY_STAGE", "prod")
    bootstrap.override(None)  # a new container of the prod stage (the same tables, pool and keyring)
    try:
        assert requests.get(f"{stack.url}/api/v1/auth/config", timeout=30).json()["development_tokens"] is False
        refused = dev.get("/tasks")
        assert (refused.status_code, refused.json()["error"]["code"]) == (401, "unauthorized")
        agent = ApiClient(stack.url, stack.agent_token("s-1"))
        assert agent.post("/agent/sessions/s-1/frames", {"frames": []}).status_code == 401
        user = ApiClient(stack.url, stack.pool_tokens("ws-prod")["AccessToken"])
        task = user.post("/tasks", {"title": "prod"}).json()
        session = user.post(f"/tasks/{task['id']}/sessions", {}).json()
        sent = user.post(f"/sessions/{session['id']}/messages", {"client_message_id": "m1", "content": "hi"})
        assert sent.status_code == 201, sent.text
        # The agent answered with the token the dispatch gave it: minted from the keyring, so accepted here
        # where a development token (above) is not.
        assert sim.wait_idle(DEADLINE)
        messages = user.get(f"/sessions/{session['id']}/transcript").json()["messages"]
        assert [m["content"] for m in messages if m["author_type"] == "agent"] == ["Echo: hi"]
    finally:
        monkeypatch.setenv("CLARIFY_STAGE", "local")
        bootstrap.override(None)


def test_pool_keys_unreachable__retryable_500_not_a_401_or_a_dropped_connection(
        stack: LocalStack, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 401 would sign the user out; a closed connection says nothing. The gateway's 5xx says: try again."""
    real = bootstrap.authenticator()
    unreachable = UserPool(os.environ["CLARIFY_USER_POOL_ID"], os.environ["CLARIFY_USER_POOL_CLIENT_ID"],
                           "http://127.0.0.1:9/.well-known/jwks.json")
    monkeypatch.setattr(bootstrap, "_auth", replace(real, users=PoolVerifier(unreachable)))
    headers = {"Authorization": f"Bearer {stack.pool_tokens('ws-1')['AccessToken']}"}
    resp = requests.get(f"{stack.url}/api/v1/tasks", headers=headers, timeout=30)
    assert resp.status_code == 500 and resp.json()["error"] == {
        "code": "gateway_error", "message": "the authorizer failed", "retryable": True}
    monkeypatch.setattr(bootstrap, "_auth", real)
    assert requests.get(f"{stack.url}/api/v1/tasks", headers=headers, timeout=30).status_code == 200


def _header(token: str) -> str:
    import base64
    head = token.split(".")[0]
    return base64.urlsafe_b64decode(head + "=" * (-len(head) % 4)).decode()


def test_ops_user_add__user_signs_in_and_sees_only_its_workspace(stack: LocalStack) -> None:
    email = f"{uuid.uuid4().hex[:8]}@example.com"
    workspace = f"ws-{uuid.uuid4().hex[:6]}"
    code, lines = run("user", "add", email, "--workspace", workspace)
    assert code == ops.OK and workspace in lines[0], lines
    cognito = aws.client("cognito-idp", endpoint_url=stack.endpoint)
    pool_id = os.environ["CLARIFY_USER_POOL_ID"]
    user = cognito.admin_get_user(UserPoolId=pool_id, Username=email)
    assert user["UserStatus"] == "FORCE_CHANGE_PASSWORD"  # Cognito emailed a temporary password
    groups = cognito.admin_list_groups_for_user(UserPoolId=pool_id, Username=email)["Groups"]
    assert [g["GroupName"] for g in groups] == [WORKSPACE_GROUP + workspace]
    assert run("user", "add", email, "--workspace", workspace)[0] == ops.OK  # again: nothing changes
    code, lines = run("user", "add", email, "--workspace", "ws-other")
    assert code == ops.FAILED and "already in workspace" in lines[0]
    cognito.admin_set_user_password(UserPoolId=pool_id, Username=email, Password="Chosen-at-first-1", Permanent=True)
    tokens = sign_in(cognito, os.environ["CLARIFY_USER_POOL_CLIENT_ID"], email, "Chosen-at-first-1")
    mine = ApiClient(stack.url, tokens["AccessToken"])
    assert mine.post("/tasks", {"title": "mine"}).status_code == 201
    assert [t["title"] for t in mine.get("/tasks").json()["tasks"]] == ["mine"]
    assert ApiClient(stack.url, stack.pool_tokens("ws-1")["AccessToken"]).get("/tasks").json()["tasks"] == []


def test_ops_agent_keys_rotate__old_tokens_valid__new_tokens_signed_with_the_new_key(stack: LocalStack) -> None:
    secret = os.environ["CLARIFY_AGENT_KEYS_SECRET"]
    container = AgentKeys(secret_store(secret))  # read before the rotation, kept
    before = container.mint("ws-1", "s-1")
    code, lines = run("--json", "agent-keys", "rotate")
    assert code == ops.OK
    rotated = json.loads(lines[0])
    fresh = AgentKeys(secret_store(secret))  # a container started after it
    after = fresh.mint("ws-1", "s-1")
    assert json.loads(_header(after))["kid"] == rotated["current"] != json.loads(_header(before))["kid"]
    assert fresh.verify(before, json.loads(_header(before))["kid"]).session_id == "s-1"
    container.ring._at -= 60  # older than the minimum interval: a kid it does not know makes it read again
    assert container.verify(after, rotated["current"]).session_id == "s-1"
    # Over HTTP too: the API's container knows the new key.
    resp = requests.post(f"{stack.url}/api/v1/agent/sessions/s-1/frames", json={"frames": []}, timeout=30,
                         headers={"Authorization": f"Bearer {after}"})
    assert resp.status_code != 401, resp.text
