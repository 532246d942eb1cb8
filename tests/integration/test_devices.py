"""The push device routes over HTTP on the local stack: the VAPID public key, registering a browser's
subscription (idempotent by endpoint), validation naming the field with nothing written, and each user seeing
and removing only their own devices."""
from __future__ import annotations

import base64
from typing import Any

import pytest

from scripts.local.stack import LocalStack
from tests.support.flow import ApiClient
from tests.support.routes import subscription_json


def devices(client: ApiClient) -> list[dict[str, Any]]:
    resp = client.get("/devices")
    assert resp.status_code == 200, resp.text
    return list(resp.json()["devices"])


def test_push_config__uncompressed_p256_key__stable(stack: LocalStack, user: ApiClient) -> None:
    first, again = (user.get("/push/config") for _ in range(2))
    assert first.status_code == 200, first.text
    key = first.json()["vapid_public_key"]
    raw = base64.urlsafe_b64decode(key + "=" * (-len(key) % 4))
    assert len(raw) == 65 and raw[0] == 4 and "=" not in key
    assert again.json() == first.json()  # made once, then read from the secret store


def test_register__same_endpoint_again__200_same_id_label_updated(stack: LocalStack, user: ApiClient) -> None:
    body = subscription_json("https://push.example.test/send/abc")
    created = user.post("/devices", {**body, "label": "Pixel"})
    assert created.status_code == 201, created.text
    again = user.post("/devices", {**body, "label": "Pixel 8"})
    assert again.status_code == 200 and again.json()["device_id"] == created.json()["device_id"]
    [listed] = devices(user)
    assert listed["device_id"] == created.json()["device_id"] and listed["label"] == "Pixel 8"
    assert "keys" not in listed and "p256dh" not in str(listed)  # keys never leave the server


@pytest.mark.parametrize(("change", "field"), [
    (lambda b: b.pop("endpoint"), "endpoint"),
    (lambda b: b.update(endpoint="http://push.example.test/x"), "endpoint"),
    (lambda b: b.update(endpoint="ftp://push.example.test/x"), "endpoint"),
    (lambda b: b.update(endpoint="https://push.example.test/" + "x" * 3000), "endpoint"),
    (lambda b: b.pop("keys"), "keys"),
    (lambda b: b["keys"].update(p256dh="not base64!"), "keys.p256dh"),
    (lambda b: b["keys"].update(p256dh=base64.urlsafe_b64encode(b"\x04" + bytes(64)).decode()), "keys.p256dh"),
    (lambda b: b["keys"].update(auth="AAAA"), "keys.auth"),
    (lambda b: b["keys"].pop("auth"), "keys.auth"),
    (lambda b: b.update(label="x" * 101), "label"),
    (lambda b: b.update(label=7), "label"),
])
def test_register__bad_subscription__400_names_the_field_nothing_written(stack: LocalStack, user: ApiClient,
                                                                           change: Any, field: str) -> None:
    body = subscription_json()
    change(body)
    resp = user.post("/devices", body)
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["code"] == "validation_error" and resp.json()["error"]["details"]["field"] == field
    assert devices(user) == []


def test_register__local_stage__http_127_0_0_1_allowed(stack: LocalStack, user: ApiClient) -> None:
    resp = user.post("/devices", subscription_json("http://127.0.0.1:9/push/local"))
    assert resp.status_code == 201, resp.text


def test_devices__own_only__others_404_like_missing(stack: LocalStack, user: ApiClient) -> None:
    mine = user.post("/devices", subscription_json("https://push.example.test/send/mine")).json()["device_id"]
    colleague = ApiClient(stack.url, stack.user_token(workspace="ws-1", sub="user-2"))
    outsider = ApiClient(stack.url, stack.user_token(workspace="ws-2", sub="user-9"))
    for other in (colleague, outsider):
        assert devices(other) == []
        refused = other.call("DELETE", f"/devices/{mine}")
        missing = other.call("DELETE", "/devices/dev-0000")
        assert refused.status_code == 404 and refused.content == missing.content
    assert [d["device_id"] for d in devices(user)] == [mine]
    assert user.call("DELETE", f"/devices/{mine}").status_code == 204
    assert devices(user) == []
    assert user.call("DELETE", f"/devices/{mine}").status_code == 404
