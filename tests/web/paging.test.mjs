// Paging in the client: the task list's further pages and the transcript's pages joined to what is held.
import { test } from "node:test";
import assert from "node:assert/strict";

import { mergeTaskPage, mergeTaskSnapshot } from "../../chalicelib/web/merge.js";
import { activeBundle, freshMessages, joinNewest, joinOlder } from "../../chalicelib/web/transcript.js";

const msg = (id) => ({ id, type: "message", content: id });
const clar = (cid, extra = {}) => ({ id: `m-${cid}`, type: "clarification", clarification_id: cid, answerable: false, ...extra });

test("a further page of tasks adds to the list and drops nothing", () => {
  const first = mergeTaskSnapshot(new Map(), [{ id: "a", title: "A" }, { id: "b", title: "B" }]);
  const more = mergeTaskPage(first.tasks, [{ id: "c", title: "C" }, { id: "gone", title: "G" }], { gone: new Set(["gone"]) });
  assert.deepEqual([...more.tasks.keys()], ["a", "b", "c"]);
});

test("a further page keeps the newer summary revision of a task already held", () => {
  const held = new Map([["a", { id: "a", status_summary: { pending_action: "clarification", revision: 5 } }]]);
  const more = mergeTaskPage(held, [{ id: "a", status_summary: { pending_action: null, revision: 3 } }]);
  assert.equal(more.tasks.get("a").status_summary.revision, 5);
});

test("the newest page read again keeps the older pages held before it", () => {
  const held = { messages: ["m1", "m2", "m3", "m4"].map(msg), older_cursor: "c0" };
  const joined = joinNewest(held, { messages: ["m3", "m4", "m5"].map(msg), older_cursor: "c2" });
  assert.deepEqual(joined.messages.map((m) => m.id), ["m1", "m2", "m3", "m4", "m5"]);
  assert.equal(joined.older_cursor, "c0");
});

test("a newest page that does not reach what is held starts over from the page", () => {
  const held = { messages: ["m1", "m2"].map(msg), older_cursor: null };
  const joined = joinNewest(held, { messages: ["m8", "m9"].map(msg), older_cursor: "c8" });
  assert.deepEqual(joined.messages.map((m) => m.id), ["m8", "m9"]);
  assert.equal(joined.older_cursor, "c8");
  assert.deepEqual(joinNewest(null, { messages: [msg("m1")], older_cursor: null }).messages.map((m) => m.id), ["m1"]);
});

test("an older page goes before what is held, without repeating a message", () => {
  const held = { messages: ["m3", "m4"].map(msg), older_cursor: "c3" };
  const joined = joinOlder(held, { messages: ["m1", "m2", "m3"].map(msg), older_cursor: null });
  assert.deepEqual(joined.messages.map((m) => m.id), ["m1", "m2", "m3", "m4"]);
  assert.equal(joined.older_cursor, null);
});

test("the pending question comes from pending_clarifications even when no page held reaches it", () => {
  const pending = [clar("q1", { answerable: true })];
  assert.equal(activeBundle(["m5", "m6"].map(msg), pending).clarification_id, "q1");
});

test("with pending_clarifications given, a stale answerable copy on an older page is not the overlay", () => {
  const stale = clar("q0", { answerable: true });
  assert.equal(activeBundle([stale, msg("m1")], []), null);
  assert.equal(activeBundle([stale, msg("m1")]).clarification_id, "q0"); // a snapshot without the field
});

test("held clarification entries show their fresh pending form", () => {
  const fresh = clar("q1", { answerable: true, state: "active_detached" });
  const shown = freshMessages([clar("q1", { answerable: true, state: "active_live" }), msg("m2")], [fresh]);
  assert.equal(shown[0], fresh);
  assert.equal(shown[1].id, "m2");
});
