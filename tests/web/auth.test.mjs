// Signing in at the user pool: tokens kept, refreshed once however many ask, refused vs unreachable, sign-out
// forgets everything; the API client refreshes on a 401 and sends the same request again.
import assert from "node:assert/strict";
import { test } from "node:test";

import { createApi } from "../../chalicelib/web/api.js";
import { claims, createAuth, forget, workspaceOf } from "../../chalicelib/web/auth.js";

const POOL = { endpoint: "https://cognito-idp.test/", client_id: "web" };

function storage() {
  const map = new Map();
  return { getItem: (k) => (map.has(k) ? map.get(k) : null), setItem: (k, v) => map.set(k, String(v)),
    removeItem: (k) => map.delete(k), key: (i) => [...map.keys()][i] ?? null, get length() { return map.size; }, map };
}

const b64 = (o) => Buffer.from(JSON.stringify(o)).toString("base64url");
const jwt = (payload) => `${b64({ alg: "RS256", kid: "k" })}.${b64(payload)}.sig`;
const access = (exp, groups = ["workspace:ws-1"]) => jwt({ token_use: "access", exp, "cognito:groups": groups });

/** Cognito's API: answers by X-Amz-Target; records each call. */
function cognito(answers) {
  const calls = [];
  const fetchImpl = async (url, init) => {
    const action = init.headers["X-Amz-Target"].split(".")[1];
    const body = JSON.parse(init.body);
    calls.push({ url, action, body });
    const answer = await answers[action](body);
    return { ok: answer.status === undefined, status: answer.status ?? 200, json: async () => answer.body ?? answer };
  };
  return { calls, fetchImpl };
}

const NOW = 1_800_000_000_000;
const signedIn = (s, exp = NOW / 1000 + 3600) =>
  s.setItem("clarify.auth", JSON.stringify({ pool: POOL, access: access(exp), refresh: "r1", email: "a@x" }));

test("workspaceOf reads the one workspace group; none or several is none", () => {
  assert.equal(workspaceOf(access(1)), "ws-1");
  assert.equal(workspaceOf(access(1, [])), null);
  assert.equal(workspaceOf(access(1, ["workspace:a", "workspace:b"])), null);
  assert.equal(workspaceOf("not a token"), null);
  assert.deepEqual(claims("x.y"), {});
});

test("sign in keeps the tokens; another user on the same browser finds nothing of the last one", async () => {
  const s = storage();
  const c = cognito({ InitiateAuth: () => ({ AuthenticationResult: { AccessToken: access(9), RefreshToken: "r" } }) });
  const auth = createAuth({ storage: s, fetchImpl: c.fetchImpl });
  auth.configure(POOL);
  await auth.signIn("a@x", "pw");
  s.setItem("clarify.draft.composer:s1", '"half"');
  await auth.signIn("a@x", "pw");
  assert.equal(s.getItem("clarify.draft.composer:s1"), '"half"', "the same user keeps drafts");
  await auth.signIn("b@x", "pw");
  assert.equal(s.getItem("clarify.draft.composer:s1"), null);
  assert.equal(auth.email, "b@x");
  assert.deepEqual(c.calls[0].body, { ClientId: "web", AuthFlow: "USER_PASSWORD_AUTH",
    AuthParameters: { USERNAME: "a@x", PASSWORD: "pw" } });
});

test("a challenge is returned, then answered with the new password", async () => {
  const c = cognito({
    InitiateAuth: () => ({ ChallengeName: "NEW_PASSWORD_REQUIRED", Session: "s" }),
    RespondToAuthChallenge: () => ({ AuthenticationResult: { AccessToken: access(9), RefreshToken: "r" } }),
  });
  const auth = createAuth({ storage: storage(), fetchImpl: c.fetchImpl });
  auth.configure(POOL);
  const challenge = await auth.signIn("a@x", "temporary");
  assert.deepEqual(challenge, { challenge: "NEW_PASSWORD_REQUIRED", session: "s", email: "a@x" });
  assert.equal(await auth.answer(challenge, "Chosen-1"), null);
  assert.deepEqual(c.calls[1].body.ChallengeResponses, { USERNAME: "a@x", NEW_PASSWORD: "Chosen-1" });
  assert.equal(auth.token(), access(9));
});

test("one refresh however many ask; a token about to expire is refreshed before it is sent", async () => {
  const s = storage();
  signedIn(s, NOW / 1000 + 30); // expires within the minute
  let release;
  const c = cognito({ InitiateAuth: () => new Promise((r) => { release = () => r({ AuthenticationResult: { AccessToken: access(NOW / 1000 + 3600) } }); }) });
  const auth = createAuth({ storage: s, fetchImpl: c.fetchImpl, now: () => NOW });
  const both = Promise.all([auth.fresh(), auth.fresh(), auth.refresh()]);
  await new Promise((r) => setTimeout(r, 0));
  release();
  const [a, b, renewed] = await both;
  assert.equal(c.calls.length, 1);
  assert.deepEqual(c.calls[0].body.AuthParameters, { REFRESH_TOKEN: "r1" });
  assert.equal(a, access(NOW / 1000 + 3600));
  assert.equal(b, a);
  assert.equal(renewed, true);
  assert.equal(JSON.parse(s.getItem("clarify.auth")).refresh, "r1", "the refresh token is kept");
  await auth.fresh();
  assert.equal(c.calls.length, 1, "a token good for an hour is not refreshed");
});

test("refused by Cognito: false (sign in again); Cognito unreachable: a rejection (still signed in)", async () => {
  const s = storage();
  signedIn(s);
  const refused = createAuth({ storage: s, fetchImpl: cognito({ InitiateAuth: () => ({ status: 400, body: { message: "Refresh Token has been revoked" } }) }).fetchImpl });
  assert.equal(await refused.refresh(), false);
  const down = createAuth({ storage: s, fetchImpl: async () => { throw new TypeError("Failed to fetch"); } });
  await assert.rejects(down.refresh(), /Failed to fetch/);
});

test("sign out revokes the refresh token and forgets everything but the pool", async () => {
  const s = storage();
  signedIn(s);
  s.setItem("clarify.draft.answer:c1", "{}");
  s.setItem("clarify.snapshot", "{}");
  s.setItem("other.app", "kept");
  const c = cognito({ RevokeToken: () => ({}) });
  await createAuth({ storage: s, fetchImpl: c.fetchImpl }).signOut();
  assert.deepEqual([...s.map.keys()].sort(), ["clarify.auth", "other.app"]);
  assert.deepEqual(JSON.parse(s.getItem("clarify.auth")), { pool: POOL });
  assert.deepEqual(c.calls.map((x) => [x.action, x.body.Token]), [["RevokeToken", "r1"]]);
  forget(s);
  assert.deepEqual([...s.map.keys()], ["other.app"]);
});

test("the API client: a 401 refreshes once and sends the same request again", async () => {
  const sent = [];
  let token = "old";
  const fetchImpl = async (url, init) => {
    sent.push({ auth: init.headers.Authorization, key: init.headers["Idempotency-Key"], body: init.body });
    const status = init.headers.Authorization === "Bearer new" ? 200 : 401;
    return { status, ok: status === 200, text: async () => "{}" };
  };
  let unauthorized = 0;
  const api = createApi({ getToken: async () => token, refresh: async () => { token = "new"; return true; }, fetchImpl,
    onUnauthorized: () => unauthorized++ });
  const result = await api.respond("c1", { rejected: true }, "idem-1");
  assert.equal(result.status, 200);
  assert.deepEqual(sent.map((x) => x.auth), ["Bearer old", "Bearer new"]);
  assert.deepEqual(sent[0].key, sent[1].key);
  assert.equal(sent[0].body, sent[1].body);
  assert.equal(unauthorized, 0);

  const refused = createApi({ getToken: () => "x", refresh: async () => false, fetchImpl, onUnauthorized: () => unauthorized++ });
  assert.equal((await refused.call("GET", "/tasks")).status, 401);
  assert.equal(unauthorized, 1);
  const offline = createApi({ getToken: () => "x", refresh: async () => { throw new Error("down"); }, fetchImpl,
    onUnauthorized: () => unauthorized++ });
  assert.equal((await offline.call("GET", "/tasks")).kind, "transport");
  assert.equal(unauthorized, 1, "Cognito unreachable does not sign the user out");
});
