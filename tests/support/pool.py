"""Tokens shaped like the user pool's, for the cells real sign-ins cannot produce (expired, forged, alg tricks).

The emulator signs every pool's tokens with one RSA key it ships (moto's jwks-private.json, kid "dummy"): with
it a test signs exactly what the pool would, then changes one thing.
"""
from __future__ import annotations

import json
import os
import time
import warnings
from typing import Any

import jwt
from jwt.algorithms import RSAAlgorithm
from moto.utilities.utils import load_resource

KID = "dummy"  # moto's key id


def private_jwk() -> dict[str, Any]:
    return dict(load_resource("cognitoidp/resources/jwks-private.json"))


def public_jwks() -> dict[str, Any]:
    return dict(load_resource("cognitoidp/resources/jwks-public.json"))


def access_claims(workspace: str | None = "ws-1", **changes: Any) -> dict[str, Any]:
    """An access token's claims for this stack's pool and client, as Cognito issues them."""
    pool_id, client_id = os.environ["CLARIFY_USER_POOL_ID"], os.environ["CLARIFY_USER_POOL_CLIENT_ID"]
    now = int(time.time())
    claims: dict[str, Any] = {
        "iss": f"https://cognito-idp.{pool_id.split('_', 1)[0]}.amazonaws.com/{pool_id}", "sub": "forged-user",
        "client_id": client_id, "token_use": "access", "iat": now, "auth_time": now, "exp": now + 3600,
        "jti": "j", "username": "forged-user", "scope": "aws.cognito.signin.user.admin"}
    if workspace is not None:
        claims["cognito:groups"] = [f"workspace:{workspace}"]
    claims.update(changes)
    return {k: v for k, v in claims.items() if v is not None}


def sign(claims: dict[str, Any], *, headers: dict[str, Any] | None = None, algorithm: str = "RS256",
         key: Any = None) -> str:
    """Signed with the pool's own private key (RS256) unless `key`/`algorithm` say otherwise."""
    if key is None and algorithm.startswith("RS"):
        key = RSAAlgorithm.from_jwk(json.dumps(private_jwk()))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return jwt.encode(claims, key, algorithm=algorithm, headers={"kid": KID, **(headers or {})})


def public_pem() -> bytes:
    from cryptography.hazmat.primitives import serialization
    key = RSAAlgorithm.from_jwk(json.dumps(public_jwks()["keys"][0]))
    return key.public_bytes(serialization.Encoding.PEM,  # type: ignore[union-attr]
                            serialization.PublicFormat.SubjectPublicKeyInfo)


def hs256_with_public_key(claims: dict[str, Any], *, kid: str | None = KID) -> str:
    """The classic confusion: HS256 keyed with the RSA public key (PyJWT itself refuses PEM keys for HMAC, so
    the token is put together by hand)."""
    import base64
    import hashlib
    import hmac

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()
    header = {"alg": "HS256", "typ": "JWT", **({"kid": kid} if kid else {})}
    signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(claims).encode())}"
    signature = hmac.new(public_pem(), signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{b64(signature)}"


def with_kid(token: str, kid: str) -> str:
    """The same token (payload and signature) under a header naming another key."""
    import base64
    header, payload, signature = token.split(".")
    head = json.loads(base64.urlsafe_b64decode(header + "=" * (-len(header) % 4)))
    head["kid"] = kid
    new = base64.urlsafe_b64encode(json.dumps(head).encode()).rstrip(b"=").decode()
    return f"{new}.{payload}.{signature}"


def claims(token: str) -> dict[str, Any]:
    """A token's claims, unverified (what a test reads back from the browser)."""
    return dict(jwt.decode(token, options={"verify_signature": False}))
