"""A local push service (RFC 8030) holding its subscriptions' private keys: what Clarify sends to an endpoint
here is checked (VAPID token signed by the key it names, for this origin; aes128gcm; TTL; Urgency) and
decrypted with http_ece, an implementation independent of Clarify's. Statuses can be scripted per
subscription (a 410, a 429 with Retry-After, a 503) to exercise expiry and retries."""
from __future__ import annotations

import base64
import json
import os
import secrets
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import http_ece
import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass
class Received:
    status: int  # what the service answered
    headers: dict[str, str]
    payload: dict[str, Any] | None  # decrypted JSON (None when the request was refused before decryption)


@dataclass
class Subscription:
    token: str
    endpoint: str
    private: ec.EllipticCurvePrivateKey
    auth: bytes
    scripted: deque[tuple[int, dict[str, str]]] = field(default_factory=deque)
    received: list[Received] = field(default_factory=list)

    def json(self, label: str | None = None) -> dict[str, Any]:
        """The browser's PushSubscription.toJSON() (plus a label)."""
        public = self.private.public_key().public_bytes(serialization.Encoding.X962,
                                                        serialization.PublicFormat.UncompressedPoint)
        body: dict[str, Any] = {"endpoint": self.endpoint, "keys": {"p256dh": b64url(public),
                                                                      "auth": b64url(self.auth)}}
        if label is not None:
            body["label"] = label
        return body

    def answer(self, status: int, times: int = 1, **headers: str) -> None:
        """The next `times` messages get `status` (and headers), then 201 again."""
        self.scripted.extend([(status, headers)] * times)

    def delivered(self) -> list[dict[str, Any]]:
        return [r.payload for r in self.received if 200 <= r.status < 300 and r.payload is not None]


class PushService:
    def __init__(self) -> None:
        self.subscriptions: dict[str, Subscription] = {}
        self.errors: list[str] = []  # protocol violations seen (a test asserts there are none)
        self._lock = threading.Lock()
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                status, extra = service.receive(self.path, dict(self.headers.items()), body)
                self.send_response(status)
                for k, v in extra.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.origin = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> PushService:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def subscribe(self) -> Subscription:
        token = secrets.token_urlsafe(16)
        sub = Subscription(token, f"{self.origin}/push/{token}", ec.generate_private_key(ec.SECP256R1()),
                           os.urandom(16))
        with self._lock:
            self.subscriptions[token] = sub
        return sub

    def receive(self, path: str, headers: dict[str, str], body: bytes) -> tuple[int, dict[str, str]]:
        token = path.rsplit("/", 1)[-1]
        with self._lock:
            sub = self.subscriptions.get(token)
        if sub is None:
            return 404, {}
        problem = self._check(headers)
        if problem:
            self.errors.append(problem)
            sub.received.append(Received(400, headers, None))
            return 400, {}
        payload = json.loads(http_ece.decrypt(body, private_key=sub.private, auth_secret=sub.auth,
                                              version="aes128gcm"))
        status, extra = sub.scripted.popleft() if sub.scripted else (201, {})
        sub.received.append(Received(status, headers, payload))
        return status, extra

    def _check(self, headers: dict[str, str]) -> str:
        h = {k.lower(): v for k, v in headers.items()}
        if h.get("content-encoding") != "aes128gcm":
            return f"Content-Encoding {h.get('content-encoding')!r}"
        if not h.get("ttl", "").isdigit() or h.get("urgency") != "high":
            return f"TTL {h.get('ttl')!r} / Urgency {h.get('urgency')!r}"
        scheme, _, params = h.get("authorization", "").partition(" ")
        fields = dict(p.strip().split("=", 1) for p in params.split(",") if "=" in p)
        if scheme != "vapid" or "t" not in fields or "k" not in fields:
            return "Authorization is not `vapid t=..., k=...`"
        point = unb64url(fields["k"])
        key = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), point)
        try:
            claims = jwt.decode(fields["t"], key, algorithms=["ES256"], audience=self.origin)
        except jwt.PyJWTError as exc:
            return f"VAPID token: {exc}"
        if not 0 < claims["exp"] - time.time() <= 24 * 3600 or not str(claims.get("sub", "")).startswith(
                ("mailto:", "https:")):
            return f"VAPID claims {claims}"
        return ""
