"""The simulated users: locust users that play the real mix against the API, each scenario bounded in
steps and time. The simulated agent plays its side from the tags in the prompts (README "The simulated
agent"). Every answer and message carries a unique marker, so the verdict can follow it to the agent.

A user retries what the contract says is retryable (no HTTP answer, 503, a retryable 502) with the same
Idempotency-Key or client_message_id, a bounded number of times; everything it was told is journaled.
"""
from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable
from typing import Any

import gevent
from locust import HttpUser, between, task
from locust.clients import HttpSession

from .journal import ACTIVE_STATES, AnswerOp, Attempt, Journal, Observation

POLL = 0.3  # between transcript reads while waiting for the agent
APPEAR = 20.0  # how long a user waits for the agent to ask, or for a state to show
ATTEMPTS = 5  # tries of one answer or message
RETRY_PAUSE = (0.5, 1.5)
TIMEOUT = 45.0  # per HTTP call: above a live respond's confirmation wait and a restart


def marker() -> str:
    return f"mk{uuid.uuid4().hex[:12]}"


def error_of(body: Any) -> tuple[str | None, bool | None]:
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return None, None
    return error.get("code"), error.get("retryable")


def retryable(status: int, code: str | None, flag: bool | None) -> bool:
    return status == 0 or status == 503 or (status == 502 and code == "dispatch_failed" and flag is not False)


class Person(HttpUser):
    """One user of one workspace, with two devices (the second one for races)."""

    abstract = True
    wait_time = between(0.2, 1.0)
    journal: Journal
    token_for: Callable[[str, str], str]
    workspaces = 3

    def on_start(self) -> None:
        self.sub = f"user-{uuid.uuid4().hex[:6]}"
        self.workspace = f"ws-load-{random.randrange(self.workspaces)}"
        self.headers = {"Authorization": f"Bearer {type(self).token_for(self.workspace, self.sub)}",
                        "Content-Type": "application/json"}
        self.device2 = HttpSession(base_url=self.host, request_event=self.environment.events.request, user=self)
        self.cursor: str | None = None

    # ------------------------------------------------------------------ HTTP
    def call(self, op: str, method: str, path: str, body: Any = None, *, headers: dict[str, str] | None = None,
             device: HttpSession | None = None, context: dict[str, Any] | None = None,
             timeout: float = TIMEOUT) -> tuple[int, Any, float, float]:
        client = device or self.client
        start = time.time()
        resp = client.request(method, "/api/v1" + path, name=op, json=body, headers={**self.headers, **(headers or {})},
                              timeout=timeout, context=context or {})
        end = time.time()
        try:
            data = resp.json() if resp.content else None
        except ValueError:
            data = None
        return int(resp.status_code or 0), data, start, end

    def new_session(self, tags: str | None, title: str) -> str | None:
        """A task and a session; with `tags`, its first prompt (tracked like any message) starts the agent."""
        status, task_body, _, _ = self.call("create task", "POST", "/tasks", {"title": title})
        if status != 201:
            return None
        mk = marker()
        body = {"prompt": f"{tags} {title} {mk}"} if tags else {}
        op = AnswerOp(mk, "prompt", "", body=body) if tags else None
        # Not retried: a second create would be a second session, not the same request again.
        status, data, start, end = self.call("create session", "POST", f"/tasks/{task_body['id']}/sessions", body,
                                             context={"marker": mk})
        if op is not None:
            code, _ = error_of(data)
            op.attempts.append(Attempt(status, code, data, start, end))
            op.session_id = str(data["id"]) if status == 201 else ""
            self.journal.answers.append(op)
            self.journal.count(self.journal.outcomes, f"create session with a prompt: {status} {code or ''}")
        return str(data["id"]) if status == 201 else None

    def transcript(self, sid: str) -> dict[str, Any] | None:
        status, body, start, end = self.call("transcript", "GET", f"/sessions/{sid}/transcript")
        if status != 200 or not isinstance(body, dict):
            return None
        for m in body.get("messages", []):
            if m.get("type") == "clarification":
                self.journal.observations.append(Observation(m["clarification_id"], m["state"],
                                                             bool(m["answerable"]), start, end))
        return body

    def question(self, sid: str, states: tuple[str, ...], timeout: float = APPEAR) -> dict[str, Any] | None:
        """The newest clarification of the session once it shows one of `states` (bounded wait)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            t = self.transcript(sid)
            found = [m for m in (t or {}).get("messages", []) if m.get("type") == "clarification"]
            if found and found[-1]["state"] in states:
                return dict(found[-1])
            gevent.sleep(POLL)
        return None

    # ------------------------------------------------------------------ answers and messages
    def respond(self, op: str, entry: dict[str, Any], *, skip: bool = False, device: HttpSession | None = None,
                race: str | None = None) -> AnswerOp:
        mk = marker()
        cid = entry["clarification_id"]
        # A question no longer pending is answered whole (the API then says why it is not active).
        pending = [q["question_id"] for q in entry["questions"] if q["status"] == "pending"] or [
            q["question_id"] for q in entry["questions"]]
        body: dict[str, Any] = ({"rejected": True, "reject_reason": mk} if skip else {"answers": [
            {"question_id": q, "selected_options": [random.choice("ab")], "custom_text": mk} for q in pending]})
        answer = AnswerOp(mk, "skip" if skip else "answer", entry["session_id"], cid, race)
        self.journal.answers.append(answer)
        key = f"k{uuid.uuid4().hex}"
        for _ in range(ATTEMPTS):
            status, data, start, end = self.call(op, "POST", f"/clarifications/{cid}/respond", body,
                                                 headers={"Idempotency-Key": key}, device=device,
                                                 context={"clarification_id": cid, "marker": mk})
            code, flag = error_of(data)
            answer.attempts.append(Attempt(status, code, data, start, end))
            reason = str(((data or {}).get("error") or {}).get("details", {}).get("reason", ""))
            if status == 409 and code == "clarification_inactive" and reason not in ("answered", "rejected"):
                # answered/rejected may name a claim still being delivered, which can be restored: not final
                self.journal.observations.append(Observation(cid, reason, False, start, end))
            if not retryable(status, code, flag):
                break
            gevent.sleep(random.uniform(*RETRY_PAUSE))
        f = answer.final
        self.journal.count(self.journal.outcomes, f"{op}: {f.status} {f.code or (data or {}).get('delivery', '')}"
                           if f else f"{op}: none")
        return answer

    def send(self, sid: str, content: str, mk: str, *, delivery: str = "auto", kind: str = "message",
             in_reply_to: dict[str, Any] | None = None) -> AnswerOp:
        cmid = f"c{uuid.uuid4().hex[:16]}"
        body: dict[str, Any] = {"client_message_id": cmid, "content": content, "delivery": delivery}
        if in_reply_to:
            body["in_reply_to"] = in_reply_to
        op = AnswerOp(mk, kind, sid, (in_reply_to or {}).get("clarification_id"), client_message_id=cmid, body=body)
        self.journal.answers.append(op)
        name = "late answer" if kind == "late" else f"send message ({delivery})"
        for _ in range(ATTEMPTS):
            status, data, start, end = self.call(name, "POST", f"/sessions/{sid}/messages", body,
                                                 context={"marker": mk})
            code, flag = error_of(data)
            op.attempts.append(Attempt(status, code, data, start, end))
            if not retryable(status, code, flag):
                break
            gevent.sleep(random.uniform(*RETRY_PAUSE))
        f = op.final
        admission = (data or {}).get("admission", "") if f and f.status < 300 else (f.code if f else "")
        self.journal.count(self.journal.outcomes, f"{name}: {f.status if f else 'none'} {admission}")
        return op

    # ------------------------------------------------------------------ scenarios
    def scenario(self, name: str) -> None:
        self.journal.count(self.journal.scenarios, name)

    @task(4)
    def live_answer(self) -> None:
        """Ask 1-4 questions; answer (or Skip) while the agent waits: delivered live."""
        self.scenario("live answer")
        n = random.randint(1, 4)
        sid = self.new_session(f"[ask:{n}] [wait:20]", "live question")
        entry = self.question(sid, ("active_live",)) if sid else None
        if entry:
            self.respond("respond (live question)", entry, skip=random.random() < 0.25)

    @task(3)
    def detached_answer(self) -> None:
        """The agent stops waiting after a second; the answer resumes it (a Skip is only recorded)."""
        self.scenario("detached answer")
        n = random.randint(1, 4)
        sid = self.new_session(f"[ask:{n}] [wait:1]", "detached question")
        entry = self.question(sid, ("active_detached",)) if sid else None
        if entry:
            self.respond("respond (detached question)", entry, skip=random.random() < 0.25)

    @task(2)
    def two_devices(self) -> None:
        """Two devices answer one question at once: one wins, the other is told who did."""
        self.scenario("two devices race")
        live = random.random() < 0.5
        sid = self.new_session(f"[ask:{random.randint(1, 4)}] [wait:{20 if live else 1}]", "race")
        entry = self.question(sid, ("active_live",) if live else ("active_detached",)) if sid else None
        if not entry:
            return
        race = uuid.uuid4().hex[:8]
        op = f"respond ({'live' if live else 'detached'} question)"
        a = gevent.spawn(self.respond, op, entry, skip=random.random() < 0.2, race=race)
        b = gevent.spawn(self.respond, op, entry, skip=random.random() < 0.2, device=self.device2, race=race)
        gevent.joinall([a, b], timeout=4 * TIMEOUT)

    @task(3)
    def messages(self) -> None:
        """A slow turn, then a queued and a steered message; the queue drains when the turn ends."""
        self.scenario("messages")
        sid = self.new_session(None, "messages")
        if not sid:
            return
        first = marker()
        sent = self.send(sid, f"[slow:2] first {first}", first)
        if not sent.told_ok:
            return
        second, third = marker(), marker()
        self.send(sid, f"second {second}", second)
        self.send(sid, f"third {third}", third, delivery="steer")
        deadline = time.time() + APPEAR
        while time.time() < deadline:  # until the agent answered the queued message
            t = self.transcript(sid)
            if t and any(second in m.get("content", "") and m.get("author_type") == "agent"
                         for m in t.get("messages", [])):
                return
            gevent.sleep(POLL)

    @task(2)
    def late_answer(self) -> None:
        """A detached question superseded by a new message: respond is refused, the answer goes as a late
        message; sometimes the newer turn's messages are deleted (the old question stays superseded)."""
        self.scenario("late answer")
        sid = self.new_session(f"[ask:{random.randint(1, 4)}] [wait:1]", "late")
        entry = self.question(sid, ("active_detached",)) if sid else None
        if not sid or not entry:
            return
        move = marker()
        if not self.send(sid, f"moving on {move}", move).told_ok:
            return
        old = self.question(sid, ("superseded",)) or self._entry(sid, entry["clarification_id"])
        if not old or old["state"] != "superseded":
            return
        self.respond("respond (superseded question)", old)
        mk = marker()
        answers = [{"question_id": q["question_id"], "selected_options": ["a"], "custom_text": mk}
                   for q in old["questions"]]
        self.send(sid, "", mk, kind="late", in_reply_to={"clarification_id": old["clarification_id"],
                                                         "answers": answers})
        if random.random() < 0.5:
            self.delete_newer(sid, old)

    def _entry(self, sid: str, cid: str) -> dict[str, Any] | None:
        t = self.transcript(sid)
        return next((m for m in (t or {}).get("messages", []) if m.get("clarification_id") == cid), None)

    def delete_newer(self, sid: str, old: dict[str, Any]) -> None:
        t = self.transcript(sid)
        newer = [m for m in (t or {}).get("messages", []) if m.get("turn_id") and m["turn_id"] != old["turn_id"]
                 and m.get("type") != "clarification"]
        for m in newer[:4]:
            self.call("delete message", "DELETE", f"/sessions/{sid}/messages/{m['id']}")
        self._entry(sid, old["clarification_id"])  # observed again: it must not have come back

    @task(1)
    def cancel(self) -> None:
        """Cancel a session while its question is live: the question expires; answering it is refused."""
        self.scenario("cancel")
        sid = self.new_session(f"[ask:{random.randint(1, 4)}] [wait:20]", "cancel me")
        entry = self.question(sid, ("active_live",)) if sid else None
        if not sid or not entry:
            return
        self.call("cancel session", "POST", f"/sessions/{sid}/cancel", {})
        old = self._entry(sid, entry["clarification_id"])
        if old and old["state"] not in ACTIVE_STATES:
            self.respond("respond (expired question)", old)

    @task(2)
    def reads(self) -> None:
        """What a client does in between: the task list (which repairs summaries) and the event feed."""
        self.scenario("reads")
        self.call("list tasks", "GET", "/tasks")
        path = "/events" + (f"?after={self.cursor}" if self.cursor else "")
        status, body, _, _ = self.call("events", "GET", path)
        if status == 200 and isinstance(body, dict):
            self.cursor = body.get("cursor") or self.cursor
