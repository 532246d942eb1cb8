"""Who is calling: pool access tokens (pure-Python RS256 against a cached JWKS), the agent keyring, and the
development token that only the local stage accepts."""
from __future__ import annotations

import json
import time
from typing import Any

import pytest

from chalicelib import bootstrap
from chalicelib.auth import rs256
from chalicelib.auth.agent_keys import AgentKeys, Keyring, new_keyring, rotated
from chalicelib.auth.fetched import Fetched
from chalicelib.auth.identity import Authenticator
from chalicelib.auth.pool import PoolVerifier, UserPool, parse_jwks
from chalicelib.auth.tokens import mint
from chalicelib.domain.errors import Unauthorized
from tests.support import pool

POOL = UserPool.at("us-east-1_abc", "client-1")
DEV = "d" * 40


@pytest.fixture(autouse=True)
def pool_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLARIFY_USER_POOL_ID", POOL.pool_id)
    monkeypatch.setenv("CLARIFY_USER_POOL_CLIENT_ID", POOL.client_id)


class Jwks:
    """The pool's JWKS endpoint, counting fetches; `documents` are served in turn (the last one repeats)."""

    def __init__(self, *documents: dict[str, Any]) -> None:
        self.documents = list(documents) or [pool.public_jwks()]
        self.fetches = 0

    def __call__(self, url: str) -> Any:
        assert url == "https://cognito-idp.us-east-1.amazonaws.com/us-east-1_abc/.well-known/jwks.json"
        self.fetches += 1
        return self.documents[min(self.fetches, len(self.documents)) - 1]


def bearer(token: str) -> str:
    return f"Bearer {token}"


# ------------------------------------------------------------------ RS256 in pure Python
def test_rs256__pool_signature__verifies_and_any_change_does_not() -> None:
    key = rs256.public_key(pool.public_jwks()["keys"][0])
    token = pool.sign(pool.access_claims())
    signing_input, signature = token.rsplit(".", 1)
    raw = rs256.base64.urlsafe_b64decode(signature + "=" * (-len(signature) % 4))
    assert rs256.verify(key, signing_input.encode(), raw)
    assert not rs256.verify(key, signing_input.encode() + b" ", raw)
    assert not rs256.verify(key, signing_input.encode(), raw[:-1])
    assert not rs256.verify(key, signing_input.encode(), bytes(key.size))
    # The same number in other clothes: with a leading zero byte, and plus n (s + n = s modulo n).
    assert not rs256.verify(key, signing_input.encode(), b"\x00" + raw)
    for n in range(64):  # a signature small enough that s + n still has the key's length (most are)
        signing_input, _, signature = pool.sign(pool.access_claims(sub=f"u{n}")).rpartition(".")
        s = int.from_bytes(rs256.base64.urlsafe_b64decode(signature + "=" * (-len(signature) % 4)), "big")
        if s + key.n < 256 ** key.size:
            break
    assert rs256.verify(key, signing_input.encode(), s.to_bytes(key.size, "big"))
    assert not rs256.verify(key, signing_input.encode(), (s + key.n).to_bytes(key.size, "big"))


@pytest.mark.parametrize("change", [{"kty": "EC"}, {"alg": "RS512"}, {"use": "enc"}, {"n": "AQAB"}, {"e": "Ag"},
                                    {"n": 5}])
def test_rs256__keys_other_than_rs256_signing_keys__refused(change: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        rs256.public_key({**pool.public_jwks()["keys"][0], **change})
    assert parse_jwks({"keys": [{**pool.public_jwks()["keys"][0], **change}]}) == {}


# ------------------------------------------------------------------ the JWKS cache
def test_fetched__loads_once__reloads_when_old_or_on_unknown_at_most_once_per_interval() -> None:
    now, loads = [0.0], []
    cache = Fetched(lambda: loads.append(now[0]) or len(loads), max_age=100, min_interval=10, clock=lambda: now[0])
    assert [cache.get(), cache.get(), cache.get(unknown=True)] == [1, 1, 1]  # unknown within the interval
    now[0] = 10
    assert cache.get(unknown=True) == 2 and cache.get(unknown=True) == 2
    now[0] = 200
    assert cache.get() == 3


def test_fetched__failed_reload__keeps_the_value_failed_first_load_raises() -> None:
    calls = iter([1])

    def load() -> int:
        return next(calls)  # StopIteration (an Exception) once exhausted
    cache = Fetched(load, max_age=0, min_interval=0)
    assert cache.get() == 1 and cache.get() == 1
    with pytest.raises(RuntimeError):
        Fetched(lambda: (_ for _ in ()).throw(RuntimeError("down")), max_age=1, min_interval=1).get()


def test_pool__many_verifications__jwks_fetched_once() -> None:
    jwks = Jwks()
    verifier = PoolVerifier(POOL, fetch=jwks)
    for _ in range(5):
        caller = verifier.verify(pool.sign(pool.access_claims("ws-9", sub="u-9")))
    assert (caller.sub, caller.role, caller.workspace_id, caller.session_id) == ("u-9", "user", "ws-9", None)
    assert jwks.fetches == 1


def test_pool__unknown_kid__refetched_once_then_rate_limited() -> None:
    rotated_jwks = {"keys": [{**pool.public_jwks()["keys"][0], "kid": "new"}]}
    jwks = Jwks(pool.public_jwks(), rotated_jwks)
    verifier = PoolVerifier(POOL, fetch=jwks)
    verifier.verify(pool.sign(pool.access_claims()))
    verifier.keys._at -= 120  # the last fetch was two minutes ago
    assert verifier.verify(pool.sign(pool.access_claims(), headers={"kid": "new"})).workspace_id == "ws-1"
    assert jwks.fetches == 2
    for _ in range(3):  # made-up key ids: refused, and no fetch each
        with pytest.raises(Unauthorized):
            verifier.verify(pool.sign(pool.access_claims(), headers={"kid": "made-up"}))
    assert jwks.fetches == 2


def test_pool__jwks_unreachable__an_error_not_a_401() -> None:
    def down(url: str) -> Any:
        raise OSError("connection refused")
    with pytest.raises(OSError):  # the gateway answers 5xx, retryable: the client does not sign the user out
        PoolVerifier(POOL, fetch=down).verify(pool.sign(pool.access_claims()))


@pytest.mark.parametrize(("what", "token"), [
    ("expired", lambda: pool.sign(pool.access_claims(exp=int(time.time()) - 1))),
    ("exp 2**1030", lambda: pool.sign(pool.access_claims(exp=2**1030))),
    ("exp NaN-like string", lambda: pool.sign(pool.access_claims(exp="1e400"))),
    ("issued in the future", lambda: pool.sign(pool.access_claims(iat=int(time.time()) + 3600))),
    ("another issuer", lambda: pool.sign(pool.access_claims(iss="https://cognito-idp.us-east-1.amazonaws.com/x"))),
    ("an ID token", lambda: pool.sign(pool.access_claims(token_use="id", client_id=None, aud="client-1"))),
    ("another client", lambda: pool.sign(pool.access_claims(client_id="client-2"))),
    ("no workspace", lambda: pool.sign(pool.access_claims(None))),
    ("groups not a list", lambda: pool.sign(pool.access_claims(**{"cognito:groups": "workspace:ws-1"}))),
    ("empty workspace", lambda: pool.sign(pool.access_claims(""))),
    ("alg none", lambda: pool.sign(pool.access_claims(), algorithm="none")),
    ("HS256 keyed with the public key", lambda: pool.hs256_with_public_key(pool.access_claims())),
    ("tampered kid", lambda: pool.with_kid(pool.sign(pool.access_claims()), "other")),
])
def test_pool__bad_tokens__unauthorized(what: str, token: Any) -> None:
    verifier = PoolVerifier(POOL, fetch=Jwks())
    with pytest.raises(Unauthorized):
        Authenticator(users=verifier).caller(bearer(token()))


# ------------------------------------------------------------------ the agent keyring
def test_keyring__parse__flat_json_as_cloudformation_generates_it() -> None:
    ring = Keyring.parse(json.dumps({"current": "k1", "k1": "x" * 64}))
    assert (ring.current, dict(ring.keys)) == ("k1", {"k1": "x" * 64})
    for bad in ({"current": "k2", "k1": "x" * 64}, {"current": "k1", "k1": "short"}, {"k1": "x" * 64},
                {"current": "k1", "k1": "x" * 64, "bad id!": "y" * 64}, ["k1"]):
        with pytest.raises(ValueError):
            Keyring.parse(json.dumps(bad))


def test_agent_keys__rotation__old_tokens_valid_until_the_next_rotation_new_kid_reloads() -> None:
    stored = [new_keyring()]
    minting = AgentKeys(lambda: stored[0].dumps())
    verifying = AgentKeys(lambda: stored[0].dumps())  # another container, which read the keyring earlier
    before = minting.mint("ws-1", "s-1")
    assert verifying.verify(before, stored[0].current).session_id == "s-1"
    stored[0] = rotated(stored[0], now=100)
    minting.ring._at = verifying.ring._at = -10_000  # both containers' copies are older than KEYRING_MAX_AGE
    after = minting.mint("ws-1", "s-1")
    assert minting.verify(after, "k100").sub == verifying.verify(before, "k1").sub == "agent:s-1"
    stored[0] = rotated(stored[0], now=200)
    verifying.ring._at = -10_000
    with pytest.raises(Unauthorized):
        verifying.verify(before, "k1")  # two rotations ago: dropped
    assert verifying.verify(after, "k100").session_id == "s-1"


def test_agent_keys__unknown_kid_reloads_the_keyring_without_waiting_for_max_age() -> None:
    stored = [new_keyring()]
    old = AgentKeys(lambda: stored[0].dumps())
    old.ring.get()
    old.ring._at -= 60  # read a minute ago: younger than KEYRING_MAX_AGE, older than the minimum interval
    stored[0] = rotated(stored[0], now=5)
    token = AgentKeys(lambda: stored[0].dumps()).mint("ws-1", "s-1")
    assert old.verify(token, "k5").session_id == "s-1"


def test_agent_keys__user_token_signed_with_an_agent_key__unauthorized() -> None:
    ring = new_keyring()
    keys = AgentKeys(ring.dumps)
    forged = mint(ring.keys["k1"], sub="u", role="user", workspace_id="ws-1", kid="k1")
    with pytest.raises(Unauthorized):
        Authenticator(agents=keys).caller(bearer(forged))


# ------------------------------------------------------------------ which stage trusts what
def test_authenticator__development_token__local_stage_only() -> None:
    dev = mint(DEV, sub="u", role="user", workspace_id="ws-1")
    assert Authenticator(dev_secret=DEV).caller(bearer(dev)).workspace_id == "ws-1"
    prod = Authenticator(users=PoolVerifier(POOL, fetch=Jwks()), agents=AgentKeys(new_keyring().dumps))
    with pytest.raises(Unauthorized):
        prod.caller(bearer(dev))
    assert prod.caller(bearer(pool.sign(pool.access_claims()))).workspace_id == "ws-1"


def test_bootstrap__prod_stage__no_development_secret_even_when_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLARIFY_AUTH_SECRET", DEV)
    monkeypatch.setenv("CLARIFY_AGENT_KEYS_SECRET", "keys")
    monkeypatch.setenv("CLARIFY_STAGE", "prod")
    assert bootstrap.build_authenticator().dev_secret is None
    monkeypatch.delenv("CLARIFY_STAGE")
    assert bootstrap.build_authenticator().dev_secret is None  # unset is not local
    monkeypatch.setenv("CLARIFY_STAGE", "local")
    assert bootstrap.build_authenticator().dev_secret == DEV


def test_bootstrap__prod_stage_without_pool_or_keyring__fails_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLARIFY_STAGE", "prod")
    monkeypatch.delenv("CLARIFY_USER_POOL_ID")
    monkeypatch.setenv("CLARIFY_AGENT_KEYS_SECRET", "keys")
    with pytest.raises(RuntimeError, match="CLARIFY_USER_POOL_ID"):
        bootstrap.build_authenticator()


def test_keyring__as_the_template_s_generated_secret__parses() -> None:
    """Secrets Manager adds GenerateStringKey, with a generated string of PasswordLength characters, to the
    SecretStringTemplate object (the emulator's CloudFormation cannot create the secret, so built here)."""
    from infra.identity import AGENT_KEYS, identity_resources
    spec = identity_resources("clarify", "prod")[AGENT_KEYS]["Properties"]["GenerateSecretString"]
    secret = {**json.loads(spec["SecretStringTemplate"]), spec["GenerateStringKey"]: "x" * spec["PasswordLength"]}
    ring = Keyring.parse(json.dumps(secret))
    assert ring.current == spec["GenerateStringKey"] and spec["ExcludePunctuation"] is True
    assert AgentKeys(lambda: json.dumps(secret)).mint("ws-1", "s-1")


def test_bootstrap__prod_stage_reads_need_no_keys__a_dispatch_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """An operator's read-only command on the prod stage (clarify-ops session) builds the dependencies without
    the stage's pool or keyring; minting an agent token asks for them, by name."""
    monkeypatch.setenv("CLARIFY_STAGE", "prod")
    monkeypatch.setenv("CLARIFY_EVENT_BUS", "none")
    monkeypatch.delenv("CLARIFY_USER_POOL_ID")
    monkeypatch.delenv("CLARIFY_AGENT_KEYS_SECRET", raising=False)
    saved = bootstrap._auth
    bootstrap._auth = None
    try:
        deps = bootstrap.build()
        with pytest.raises(RuntimeError, match="CLARIFY_AGENT_KEYS_SECRET"):
            deps.agent_token("ws-1", "s-1")
    finally:
        bootstrap._auth = saved
