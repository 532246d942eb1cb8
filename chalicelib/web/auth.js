// Sign-in at the user pool: Cognito's own API, called from the page (no hosted page), the tokens kept for reloads
// and the access token refreshed before it expires or when the API refuses it.
// The password flow over TLS, not SRP: the emulator accepts any SRP proof, so SRP code could not be tested here,
// and either way the password goes to Cognito only, never to Clarify.

const KEY = "clarify.auth";
const SOON_MS = 60_000;

export function claims(token) {
  try {
    return JSON.parse(atob(token.split(".")[1].replace(/-/g, "+").replace(/_/g, "/")));
  } catch {
    return {};
  }
}

/** The workspace named by the access token's one `workspace:` group, else null (the API refuses such a user). */
export function workspaceOf(token) {
  const groups = (claims(token)["cognito:groups"] ?? []).filter((g) => g.startsWith("workspace:"));
  return groups.length === 1 ? groups[0].slice(10) : null;
}

/** Remove everything this client kept in `storage` (tokens, drafts, snapshots): nothing of a user survives. */
export function forget(storage) {
  const keys = Array.from({ length: storage.length }, (_, i) => storage.key(i));
  for (const key of keys) if (key?.startsWith("clarify.")) storage.removeItem(key);
}

// Read from storage at each use: the tabs of one browser share one sign-in, and a refresh in one serves them all.
export function createAuth({ storage, fetchImpl = (...args) => fetch(...args), now = () => Date.now() }) {
  const load = () => {
    try {
      return JSON.parse(storage.getItem(KEY)) ?? {};
    } catch {
      return {};
    }
  };
  let refreshing = null;
  const save = (value) => storage.setItem(KEY, JSON.stringify(value));

  async function cognito(action, body) {
    const { endpoint, client_id: ClientId } = load().pool;
    const resp = await fetchImpl(endpoint, { method: "POST", body: JSON.stringify({ ClientId, ...body }), headers: {
      "Content-Type": "application/x-amz-json-1.1", "X-Amz-Target": `AWSCognitoIdentityProviderService.${action}` } });
    const data = await resp.json().catch(() => ({}));
    if (!resp.ok) throw Object.assign(new Error(data.message ?? data.Message ?? `HTTP ${resp.status}`), { refused: true });
    return data;
  }

  /** Tokens, or the challenge to answer next ({challenge, session, email}: a new password, an MFA code). */
  function result(data, email) {
    const r = data.AuthenticationResult;
    if (!r) return { challenge: data.ChallengeName, session: data.Session, email };
    const saved = load();
    if (email && email !== saved.email) forget(storage); // another user on this browser: nothing of the last one stays
    save({ ...saved, access: r.AccessToken, refresh: r.RefreshToken ?? saved.refresh, email: email ?? saved.email });
    return null;
  }

  return {
    get pool() { return load().pool ?? null; },
    get email() { return load().email ?? null; },
    configure: (pool) => save({ ...load(), pool }),
    token: () => load().access ?? null,
    useToken: (access) => save({ ...load(), refresh: null, access }),
    signIn: async (email, password) => result(await cognito("InitiateAuth", {
      AuthFlow: "USER_PASSWORD_AUTH", AuthParameters: { USERNAME: email, PASSWORD: password } }), email),
    answer: async ({ challenge, session, email }, value) => result(await cognito("RespondToAuthChallenge", {
      ChallengeName: challenge, Session: session, ChallengeResponses: {
        USERNAME: email, [challenge === "NEW_PASSWORD_REQUIRED" ? "NEW_PASSWORD" : "SOFTWARE_TOKEN_MFA_CODE"]: value } }), email),
    /** A new access token from the refresh token (one call however many ask): true, false when Cognito refused
     * it (sign in again), a rejection when Cognito could not be reached (the session stays). */
    refresh() {
      const { refresh, pool } = load();
      if (!refresh || !pool) return Promise.resolve(false);
      refreshing ??= cognito("InitiateAuth", { AuthFlow: "REFRESH_TOKEN_AUTH", AuthParameters: { REFRESH_TOKEN: refresh } })
        .then((data) => result(data) === null, (error) => { if (error.refused) return false; throw error; })
        .finally(() => { refreshing = null; });
      return refreshing;
    },
    /** The access token to send, refreshed first when it expires within a minute. */
    async fresh() {
      const { access, refresh } = load();
      if (refresh && access && claims(access).exp * 1000 - SOON_MS < now()) await this.refresh().catch(() => {});
      return load().access ?? null;
    },
    /** Sign out: the refresh token is revoked at Cognito (best effort) and everything kept here is removed. */
    async signOut() {
      const { refresh, pool } = load();
      const revoked = refresh && pool ? cognito("RevokeToken", { Token: refresh }).catch(() => {}) : null;
      forget(storage);
      if (pool) save({ pool });
      await Promise.race([revoked, new Promise((resolve) => setTimeout(resolve, 3000))]);
    },
  };
}
