"""The local server as CloudFront and API Gateway serve Clarify: the client's files at exact paths, the security
headers of chalicelib/hosting.py on every answer, CORS for the configured origins only. Over HTTP."""
from __future__ import annotations

import http.client
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from chalicelib import hosting
from chalicelib.api import cors
from scripts.local.sim_agent import SimAgent
from scripts.local.stack import LocalStack

V1 = "/api/v1"
ALLOWED = "https://portal.example.com"
OTHER = "https://evil.example.net"


@pytest.fixture(scope="module")
def stack(shared: tuple[LocalStack, SimAgent]) -> LocalStack:
    return shared[0]


def raw(stack: LocalStack, method: str, path: str, headers: dict[str, str] | None = None) -> http.client.HTTPResponse:
    """Exactly `path` on the wire (no client-side normalisation of `;` or a trailing slash)."""
    url = urlsplit(stack.url)
    conn = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port, timeout=30)
    conn.request(method, path, headers=headers or {})
    resp = conn.getresponse()
    resp.read()
    conn.close()
    return resp


def _security(resp: http.client.HTTPResponse) -> dict[str, str | None]:
    return {name: resp.getheader(name) for name in hosting.local_headers()}


@pytest.mark.parametrize("path, kind", [("/", "text/html; charset=utf-8"), ("/sw.js", "text/javascript; charset=utf-8"),
                                        ("/web/app.js", "text/javascript; charset=utf-8"),
                                        ("/web/style.css", "text/css; charset=utf-8"),
                                        ("/web/manifest.webmanifest", "application/manifest+json")])
def test_client_files__typed_revalidated_with_security_headers(stack: LocalStack, path: str, kind: str) -> None:
    resp = raw(stack, "GET", path)
    assert resp.status == 200 and resp.getheader("Content-Type") == kind
    assert resp.getheader("Cache-Control") == "no-cache"
    assert _security(resp) == hosting.local_headers()


@pytest.mark.parametrize("path", ["/web/app.js/", "/web/app.js;.html", "/web/app.js%3B.html", "/web/index.html",
                                  "/web/../app.py", "/web/", "/index.html", "/web/App.js"])
def test_client_files__anything_but_the_exact_path__404(stack: LocalStack, path: str) -> None:
    resp = raw(stack, "GET", path)
    assert resp.status == 404 and resp.getheader("Content-Type") == "application/json"
    assert _security(resp) == hosting.local_headers()


@pytest.mark.parametrize("name, size", [("icon-192.png", 192), ("icon-512.png", 512),
                                        ("icon-maskable-512.png", 512), ("apple-touch-icon.png", 180)])
def test_png_icons__served_as_png_of_their_size(stack: LocalStack, name: str, size: int) -> None:
    url = urlsplit(stack.url)
    conn = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port, timeout=30)
    conn.request("GET", f"/web/{name}")
    resp = conn.getresponse()
    body = resp.read()
    conn.close()
    assert resp.status == 200 and resp.getheader("Content-Type") == "image/png"
    assert body[:8] == b"\x89PNG\r\n\x1a\n" and body[12:16] == b"IHDR"
    assert (int.from_bytes(body[16:20], "big"), int.from_bytes(body[20:24], "big")) == (size, size)
    html = raw_body(stack, "/")
    manifest = raw_body(stack, "/web/manifest.webmanifest")
    assert f"/web/{name}".encode() in html + manifest


def raw_body(stack: LocalStack, path: str) -> bytes:
    url = urlsplit(stack.url)
    conn = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port, timeout=30)
    conn.request("GET", path)
    body = conn.getresponse().read()
    conn.close()
    return body


def test_api_answers__carry_nosniff_and_the_security_headers(stack: LocalStack) -> None:
    for path, status in ((f"{V1}/health", 200), (f"{V1}/tasks", 401), (f"{V1}/nothing", 404)):
        resp = raw(stack, "GET", path)
        assert resp.status == status, path
        assert _security(resp) == hosting.local_headers(), path


# ------------------------------------------------------------------ CORS
@pytest.fixture
def allowed_origin(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv(cors.ENV, f" {ALLOWED} , https://other-portal.example.com")
    yield ALLOWED


def _cors(resp: http.client.HTTPResponse) -> dict[str, str]:
    return {k: v for k, v in resp.getheaders() if k.lower().startswith("access-control-")}


def test_preflight__configured_origin__allowed_methods_and_headers(stack: LocalStack, allowed_origin: str) -> None:
    resp = raw(stack, "OPTIONS", f"{V1}/tasks", {"Origin": allowed_origin, "Access-Control-Request-Method": "POST",
                                                  "Access-Control-Request-Headers": "authorization,content-type"})
    assert resp.status == 204
    assert resp.getheader("Access-Control-Allow-Origin") == allowed_origin
    assert "POST" in (resp.getheader("Access-Control-Allow-Methods") or "")
    allowed_headers = (resp.getheader("Access-Control-Allow-Headers") or "").lower()
    assert "authorization" in allowed_headers and "content-type" in allowed_headers
    assert resp.getheader("Vary") == "Origin"


def test_preflight__any_other_origin__no_allow_origin(stack: LocalStack, allowed_origin: str) -> None:
    for origin in (OTHER, "null", f"{ALLOWED},{OTHER}", ALLOWED + "/", "http://portal.example.com"):
        resp = raw(stack, "OPTIONS", f"{V1}/tasks", {"Origin": origin, "Access-Control-Request-Method": "POST"})
        assert resp.status == 204 and _cors(resp) == {}, origin


def test_preflight__nothing_configured__no_allow_origin_for_anyone(stack: LocalStack,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(cors.ENV, raising=False)
    resp = raw(stack, "OPTIONS", f"{V1}/tasks", {"Origin": ALLOWED, "Access-Control-Request-Method": "GET"})
    assert resp.status == 204 and _cors(resp) == {}


def test_preflight__unknown_route__404(stack: LocalStack, allowed_origin: str) -> None:
    resp = raw(stack, "OPTIONS", f"{V1}/nothing", {"Origin": allowed_origin, "Access-Control-Request-Method": "GET"})
    assert resp.status == 404


def test_requests__allow_origin_for_the_configured_origin_only(stack: LocalStack, allowed_origin: str) -> None:
    token = stack.user_token()
    ok = raw(stack, "GET", f"{V1}/tasks", {"Origin": allowed_origin, "Authorization": f"Bearer {token}"})
    assert ok.status == 200 and ok.getheader("Access-Control-Allow-Origin") == allowed_origin
    assert ok.getheader("Vary") == "Origin"
    other = raw(stack, "GET", f"{V1}/tasks", {"Origin": OTHER, "Authorization": f"Bearer {token}"})
    assert other.status == 200 and _cors(other) == {}
