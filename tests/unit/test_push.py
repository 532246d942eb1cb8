"""Web Push at the unit level: the pure-Python crypto against published vectors and `cryptography`, the VAPID
key's first-write race, the payload's bounds, and delivery's retry, expiry and marker rules over fakes."""
from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import http_ece
import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec as cec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

from chalicelib.domain import devices as d
from chalicelib.domain.errors import ValidationError
from chalicelib.push import ec, webpush
from chalicelib.push.vapid import Vapid, b64url, load_or_make, unb64url
from chalicelib.services import push
from chalicelib.store.devices import MemoryDevices
from tests.support.world import World

# RFC 8291 Appendix A.
RFC8291 = {
    "plaintext": b"When I grow up, I want to be a watermelon",
    "as_private": "yfWPiYE-n46HLnH0KqZOF1fJJU3MYrct3AELtAQ-oRw",
    "ua_public": "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4",
    "auth": "BTBZMqHH6r4Tts7J_aSIgg", "salt": "DGv6ra1nlYgDCS1FRnbzlw",
    "body": "DGv6ra1nlYgDCS1FRnbzlwAAEABBBP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8w"
            "EqKK6PBru3jl7A_yl95bQpu6cVPTpK4Mqgkf1CXztLVBSt2Ks3oZwbuwXPXLWyouBWLVWGNWQexSgSxsj_Qulcy4a-fN",
}


def raw_public(key: cec.EllipticCurvePrivateKey) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)


# ------------------------------------------------------------------ crypto
def test_encrypt__rfc8291_appendix_a__same_bytes() -> None:
    body = webpush.encrypt(RFC8291["plaintext"], unb64url(RFC8291["ua_public"]), unb64url(RFC8291["auth"]),
                           salt=unb64url(RFC8291["salt"]), private=int.from_bytes(unb64url(RFC8291["as_private"]),
                                                                                  "big"))
    assert b64url(body) == RFC8291["body"]


@pytest.mark.parametrize("size", [0, 1, 15, 16, 17, 255, webpush.MAX_PAYLOAD])
def test_encrypt__any_size__http_ece_decrypts(size: int) -> None:
    browser, auth = cec.generate_private_key(cec.SECP256R1()), os.urandom(16)
    payload = os.urandom(size)
    body = webpush.encrypt(payload, raw_public(browser), auth)
    assert http_ece.decrypt(body, private_key=browser, auth_secret=auth, version="aes128gcm") == payload
    assert len(body) <= webpush.RECORD_SIZE


def test_encrypt__over_the_limit__refused() -> None:
    with pytest.raises(ValueError, match="at most"):
        webpush.encrypt(bytes(webpush.MAX_PAYLOAD + 1), raw_public(cec.generate_private_key(cec.SECP256R1())),
                        bytes(16))


def test_ecdh_and_es256__match_cryptography() -> None:
    mine = ec.new_private_key()
    theirs = cec.generate_private_key(cec.SECP256R1())
    mine_c = cec.derive_private_key(mine, cec.SECP256R1())
    assert ec.public_key(mine) == raw_public(mine_c)
    assert ec.shared_secret(mine, raw_public(theirs)) == theirs.exchange(cec.ECDH(), mine_c.public_key())
    signature = ec.sign_es256(mine, b"payload")
    mine_c.public_key().verify(encode_dss_signature(int.from_bytes(signature[:32], "big"),
                                                    int.from_bytes(signature[32:], "big")),
                               b"payload", cec.ECDSA(hashes.SHA256()))


def test_rfc6979__p256_sha256_sample__published_signature() -> None:
    # RFC 6979 A.2.5: P-256, SHA-256, message "sample".
    x = 0xC9AFA9D845BA75166B5C215767B1D6934E50C3DB36E89B127B8A622B120F6721
    assert ec.sign_es256(x, b"sample").hex().upper() == (
        "EFD48B2AACB6A8FD1140DD9CD45E81D69D2C877B56AAF991C34D0EA84EAF3716"
        "F7CB1C942D657C41D436C7A1B6E29F65F3E900DBB9AFF4064DC4AB2F843ACDA8")


def test_decode_point__off_the_curve__refused() -> None:
    good = bytearray(ec.public_key(ec.new_private_key()))
    good[-1] ^= 1
    with pytest.raises(ValueError, match="not a point"):
        ec.decode_point(bytes(good))


# ------------------------------------------------------------------ the VAPID key
def test_vapid_key__two_first_writers__both_use_the_first_stored() -> None:
    stored: list[str] = ["{}"]

    def read() -> str:
        return stored[-1]

    def write_first(text: str) -> bool:  # Secrets Manager with a fixed ClientRequestToken: one version wins
        if len(stored) > 1:
            return False
        stored.append(text)
        return True

    first = load_or_make(read, write_first)
    second_reader_saw_empty = ["{}", stored[-1]]
    second = load_or_make(lambda: second_reader_saw_empty.pop(0), write_first)
    assert first == second and len(stored) == 2


def test_vapid_token__signed_for_the_endpoint_origin__reused() -> None:
    import jwt
    now = [1_700_000_000.0]
    vapid = Vapid(ec.new_private_key(), "mailto:ops@example.com", clock=lambda: now[0])
    header = vapid.authorization("https://push.example.net/send/abc?x=1")
    token = header.split("t=")[1].split(",")[0]
    key = cec.EllipticCurvePublicKey.from_encoded_point(cec.SECP256R1(), unb64url(vapid.public_key))
    claims = jwt.decode(token, key, algorithms=["ES256"], audience="https://push.example.net",
                        options={"verify_exp": False})
    assert claims["exp"] - now[0] <= 24 * 3600 and claims["sub"] == "mailto:ops@example.com"
    assert vapid.authorization("https://push.example.net/other") == header
    now[0] += 7 * 3600  # under six hours to live: a new one
    assert vapid.authorization("https://push.example.net/other") != header


# ------------------------------------------------------------------ subscriptions and payloads
def test_subscription__http_localhost__local_stage_only() -> None:
    sub = {"endpoint": "http://127.0.0.1:9/push/x",
           "keys": {"p256dh": b64url(ec.public_key(ec.new_private_key())), "auth": b64url(bytes(16))}}
    assert d.subscription(sub, local=True).endpoint == sub["endpoint"]
    with pytest.raises(ValidationError) as refused:
        d.subscription(sub, local=False)
    assert refused.value.field == "endpoint"


def test_notification__long_texts__cut_to_fit_and_marked() -> None:
    data = d.notification(clarification_id="c1", session_id="s1", task_id="t1", title="é" * 5000,
                          question="😀" * 5000, max_bytes=webpush.MAX_PAYLOAD)
    payload = json.loads(data)
    assert len(data) <= webpush.MAX_PAYLOAD
    assert payload["title"].endswith("…") and payload["question"].endswith("…")
    assert set(payload) == {"type", "clarification_id", "session_id", "task_id", "title", "question"}
    tight = d.notification(clarification_id="c1", session_id="s1", task_id="t1", title="x" * 100,
                           question="y" * 600, max_bytes=300)
    assert len(tight) <= 300


# ------------------------------------------------------------------ delivery over fakes
class Transport:
    def __init__(self, *statuses: int | tuple[int, float]) -> None:
        self.script = list(statuses)
        self.calls: list[tuple[str, bytes, Mapping[str, str]]] = []

    def __call__(self, url: str, body: bytes, headers: Mapping[str, str]) -> webpush.Outcome:
        self.calls.append((url, body, headers))
        step = self.script.pop(0) if self.script else 201
        return webpush.Outcome(*step) if isinstance(step, tuple) else webpush.Outcome(step)


def pushing(transport: Transport) -> tuple[World, MemoryDevices, d.Device, cec.EllipticCurvePrivateKey, bytes]:
    w = World()
    browser, auth = cec.generate_private_key(cec.SECP256R1()), os.urandom(16)
    devices = MemoryDevices()
    device = d.Device(id="dev-1", workspace_id="ws-1", user="user-1", endpoint="https://push.example.net/x",
                      p256dh=b64url(raw_public(browser)), auth=b64url(auth), label="", created_at=w.deps.now())
    devices.register(device)
    vapid = Vapid(ec.new_private_key(), "mailto:ops@example.com")
    w.deps = replace(w.deps, devices=devices, pusher=push.Pusher(vapid=lambda: vapid, transport=transport))
    return w, devices, device, browser, auth


def event(w: World, sid: str, cid: str) -> dict[str, Any]:
    return {"type": "message.added", "workspace_id": "ws-1", "session_id": sid,
            "payload": {"type": "clarification", "clarification_id": cid}}


def test_deliver__503_twice__backs_off_then_sends() -> None:
    transport = Transport(503, (503, 30.0), 201)
    w, _, _, browser, auth = pushing(transport)
    sid, cid = w.waiting()
    slept_before = w.sleeper.slept
    report = push.deliver(w.deps, event(w, sid, cid))
    assert report.sent == 1 and len(transport.calls) == 3
    assert w.sleeper.slept - slept_before == pytest.approx(0.5 + push.MAX_RETRY_WAIT)  # Retry-After is capped
    bodies = {c[1] for c in transport.calls}
    assert len(bodies) == 3  # each try encrypted afresh
    payload = json.loads(http_ece.decrypt(transport.calls[-1][1], private_key=browser, auth_secret=auth,
                                          version="aes128gcm"))
    assert payload["clarification_id"] == cid


def test_deliver__400__not_retried_not_reported_for_redelivery() -> None:
    transport = Transport(400)
    w, devices, _, _, _ = pushing(transport)
    sid, cid = w.waiting()
    report = push.deliver(w.deps, event(w, sid, cid))
    assert (report.sent, report.failed, len(transport.calls)) == (0, [], 1)
    assert devices.list_devices("ws-1")  # kept: only 404/410 mean the subscription is gone


def test_deliver__marker_of_a_dead_invocation__sent_after_its_deadline() -> None:
    transport = Transport()
    w, devices, device, _, _ = pushing(transport)
    sid, cid = w.waiting()
    assert devices.claim_push("ws-1", cid, device.id, now=w.deps.now(), until=w.deps.deadline(), expires_at=0)
    assert push.deliver(w.deps, event(w, sid, cid)).skipped == 1  # another invocation may be sending right now
    w.clock.advance(w.deps.settings.owner_window.total_seconds() + 1)
    assert push.deliver(w.deps, event(w, sid, cid)).sent == 1
    assert push.deliver(w.deps, event(w, sid, cid)).skipped == 1
    assert len(transport.calls) == 1


def test_deliver__other_events__ignored() -> None:
    transport = Transport()
    w, _, _, _, _ = pushing(transport)
    sid, _ = w.waiting()
    for detail in ({"type": "message.added", "workspace_id": "ws-1", "session_id": sid,
                    "payload": {"type": "message"}},
                   {"type": "session.updated", "workspace_id": "ws-1", "session_id": sid, "payload": {}}):
        assert push.deliver(w.deps, detail).reason == "not a pending question"
    assert transport.calls == []


def test_deliver__event_naming_another_workspace__nothing_sent() -> None:
    transport = Transport()
    w, devices, device, _, _ = pushing(transport)
    devices.register(replace(device, workspace_id="ws-2", user="user-9"))  # ws-2 has a device to push to
    sid, cid = w.waiting()
    forged = {**event(w, sid, cid), "workspace_id": "ws-2"}
    assert push.deliver(w.deps, forged).sent == 0 and transport.calls == []
