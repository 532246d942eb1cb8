"""The web client in a real browser (Debian's chromium driven by Playwright) against the real local stack
with the simulated agent, in a 1280x800 desktop and a 390x844 phone viewport (issue 7).

The stream pump runs in a background thread so the client's /events long-poll converges; a test that needs
the client to miss a change pauses it. Screenshots of each step go to artifacts/screenshots/.
"""
from __future__ import annotations

import os
import re
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from scripts.local.sim_agent import SimAgent
from scripts.local.stack import LocalStack
from tests.support.flow import ApiClient

try:
    from playwright.sync_api import Browser, Locator, Page, expect, sync_playwright
except ImportError:  # reported by the browser fixture
    sync_playwright = None

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "artifacts" / "screenshots"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
VIEWPORTS = {"desktop": {"width": 1280, "height": 800}, "phone": {"width": 390, "height": 844}}
UI_TIMEOUT = 15_000  # ms

pytestmark = pytest.mark.timeout(120)


# ------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    missing = sync_playwright is None or not Path(CHROMIUM).exists()
    if missing:
        why = "playwright (pip) and Debian's chromium are needed for the browser tests"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


class PumpThread:
    """Runs the stream functions continuously, like Lambda's event source mapping; pausable."""

    def __init__(self, stack: LocalStack) -> None:
        assert stack.pump is not None
        self.pump = stack.pump
        self._lock = threading.Lock()
        self._paused = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="browser-test-pump")

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                handled = 0 if self._paused else self.pump.poll_once()
            if handled == 0:
                self._stop.wait(0.05)

    def start(self) -> PumpThread:
        self._thread.start()
        return self

    def pause(self) -> None:
        with self._lock:  # waits out a pass in progress
            self._paused = True

    def resume(self) -> None:
        with self._lock:
            self._paused = False

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


@pytest.fixture
def pump(stack: LocalStack) -> Iterator[PumpThread]:
    thread = PumpThread(stack).start()
    yield thread
    thread.stop()


@pytest.fixture(params=list(VIEWPORTS))
def ui(request: pytest.FixtureRequest, browser: Browser, stack: LocalStack, pump: PumpThread) -> Iterator[Ui]:
    viewport = request.param
    context = browser.new_context(viewport=VIEWPORTS[viewport], device_scale_factor=1)
    page = context.new_page()
    page.set_default_timeout(UI_TIMEOUT)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    name = re.sub(r"\W+", "_", request.node.originalname.removeprefix("test_"))
    app = Ui(page, stack, viewport, f"{name}-{viewport}")
    app.goto()
    yield app
    app.shot("end")  # the last state, also when the test failed
    context.close()
    assert not errors, f"uncaught errors in the page: {errors}"


# ------------------------------------------------------------------ the client, from a user's point of view
class Ui:
    def __init__(self, page: Page, stack: LocalStack, viewport: str, name: str) -> None:
        self.page, self.stack, self.viewport, self.name = page, stack, viewport, name
        self.step = 0
        SHOTS.mkdir(parents=True, exist_ok=True)

    @property
    def phone(self) -> bool:
        return self.viewport == "phone"

    def goto(self, route: str = "#/") -> None:
        token = self.stack.user_token()
        self.page.goto(f"{self.stack.url}/#token={token}")
        expect(self.page.locator(".task-panel, #open-sheet").first).to_be_visible()
        if route != "#/":
            self.page.evaluate("route => { location.hash = route; }", route)
            self.wait_route(route)

    def reload(self) -> None:
        self.page.reload()
        expect(self.page.locator("#topbar")).to_be_visible()

    def shot(self, label: str) -> Path:
        self.step += 1
        path = SHOTS / f"{self.name}-{self.step:02d}-{label}.png"
        self.page.screenshot(path=str(path))
        return path

    def route(self) -> str:
        return str(self.page.evaluate("location.hash"))

    def wait_route(self, route: str) -> None:
        self.page.wait_for_function("route => location.hash === route", arg=route)

    # task list: the sidebar on the desktop, the bottom sheet on the phone
    def task_list(self) -> Locator:
        if self.phone:
            if not self.page.locator("#task-sheet").is_visible():
                self.page.get_by_role("button", name=re.compile("^Tasks")).click()
            return self.page.locator("#task-sheet")
        return self.page.locator("#sidebar")

    def close_task_list(self) -> None:
        if self.phone and self.page.locator("#task-sheet").is_visible():
            self.page.locator("#task-sheet").get_by_role("button", name="Close").click()
            expect(self.page.locator("#task-sheet")).to_have_count(0)

    def task_row(self, task_id: str) -> Locator:
        return self.task_list().locator(f'.task-row[data-task-id="{task_id}"]')

    def expect_icon(self, task_id: str, shown: bool) -> None:
        icon = self.task_row(task_id).locator(".q-icon")
        expect(icon).to_have_count(1 if shown else 0)

    def activate(self, task_id: str, flow: Flow) -> None:
        """Taps the task row once the list shows the server's current summary revision.

        A tap while a newer revision is still on its way is (correctly) answered with the task-only route.
        """
        revision = flow.settled_summary(task_id)["revision"]
        expect(self.task_row(task_id)).to_have_attribute("data-revision", str(revision))
        self.task_row(task_id).click()

    def overlay(self) -> Locator:
        return self.page.locator("#overlay")

    def entry(self, clarification_id: str) -> Locator:
        return self.page.locator(f'li.clar[data-clarification-id="{clarification_id}"]')


def session_route(task_id: str, session_id: str) -> str:
    return f"#/tasks/{task_id}/sessions/{session_id}"


# ------------------------------------------------------------------ the server side
class Flow:
    def __init__(self, user: ApiClient, sim: SimAgent) -> None:
        self.user, self.sim = user, sim
        self.n = 0

    def task(self, title: str) -> str:
        resp = self.user.post("/tasks", {"title": title})
        assert resp.status_code == 201, resp.text
        return str(resp.json()["id"])

    def session(self, task_id: str, prompt: str) -> str:
        resp = self.user.post(f"/tasks/{task_id}/sessions", {"prompt": prompt})
        assert resp.status_code == 201, resp.text
        return str(resp.json()["id"])

    def send(self, session_id: str, content: str) -> dict[str, Any]:
        self.n += 1
        resp = self.user.post(f"/sessions/{session_id}/messages", {"client_message_id": f"setup-{self.n}",
                                                                  "content": content})
        assert resp.status_code in (200, 201), resp.text
        return dict(resp.json())

    def state(self, session_id: str) -> str:
        return str(self.user.get(f"/sessions/{session_id}").json()["state"])

    def messages(self, session_id: str) -> list[dict[str, Any]]:
        resp = self.user.get(f"/sessions/{session_id}/transcript")
        assert resp.status_code == 200, resp.text
        return list(resp.json()["messages"])

    def bundles(self, session_id: str) -> list[dict[str, Any]]:
        return [m for m in self.messages(session_id) if m["type"] == "clarification"]

    def summary(self, task_id: str) -> dict[str, Any]:
        tasks = {t["id"]: t for t in self.user.get("/tasks").json()["tasks"]}
        return dict(tasks[task_id]["status_summary"])

    def settled_summary(self, task_id: str) -> dict[str, Any]:
        """The task summary once two reads a moment apart agree (stream processing has caught up)."""
        def stable() -> dict[str, Any] | None:
            first = self.summary(task_id)
            time.sleep(0.3)
            return first if self.summary(task_id) == first else None
        return dict(eventually(stable, f"a settled summary for {task_id}"))

    def asked(self, session_id: str, count: int = 1) -> list[str]:
        """Clarification ids the agent asked in this session, once it has asked `count` of them."""
        def ready() -> list[str] | None:
            ids = [b["clarification_id"] for b in self.bundles(session_id)]
            return ids if len(ids) >= count else None
        return eventually(ready, f"{count} question(s) asked in {session_id}")

    def turn_closed(self, session_id: str) -> bool:
        turns = self.user.get(f"/sessions/{session_id}/turns").json()["turns"]
        return bool(turns) and turns[-1]["completed_at"] is not None

    def detached_and_idle(self, session_id: str) -> None:
        """Waits until the agent gave up waiting ([wait:S]) and finished its turn (the question stays active)."""
        eventually(lambda: all(b["agent_disconnected"] for b in self.bundles(session_id))
                   and self.turn_closed(session_id) or None, f"session {session_id} detached and idle")


def eventually(check: Callable[[], Any], what: str, timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


@pytest.fixture
def flow(user: ApiClient, sim: SimAgent) -> Flow:
    return Flow(user, sim)


# ------------------------------------------------------------------ tests
def test_task_activation__secondary_session_question__opens_that_session(ui: Ui, flow: Flow) -> None:
    task = flow.task("Migrate billing")
    primary = flow.session(task, "[hang] primary work")
    ui.goto(session_route(task, primary))  # the primary becomes the remembered session of this task
    expect(ui.page.get_by_text("[hang] primary work")).to_be_visible()
    ui.expect_icon(task, False)
    ui.shot("primary-remembered")

    secondary = flow.session(task, "[ask] secondary asks")
    cid = flow.asked(secondary)[0]
    ui.expect_icon(task, True)  # live through /events
    ui.shot("question-icon")
    ui.activate(task, flow)

    ui.wait_route(session_route(task, secondary))  # the owner outranks remembered and primary sessions
    expect(ui.overlay()).to_be_visible()
    expect(ui.overlay()).to_have_attribute("data-clarification-id", cid)
    expect(ui.page.locator("#task-sheet")).to_have_count(0)
    ui.shot("owner-opened")


def test_skip__rejects_the_visible_bundle(ui: Ui, flow: Flow) -> None:
    task = flow.task("Pick a cache")
    session = flow.session(task, "[ask:2] two questions")
    cid = flow.asked(session)[0]
    ui.expect_icon(task, True)
    ui.activate(task, flow)
    ui.wait_route(session_route(task, session))
    overlay = ui.overlay()
    expect(overlay.get_by_role("group")).to_have_count(2)
    expect(overlay.get_by_role("button", name="Submit answers")).to_be_disabled()
    ui.shot("overlay")

    overlay.get_by_role("button", name=re.compile("^Skip")).click()
    expect(ui.overlay()).to_have_count(0)
    expect(ui.entry(cid)).to_have_attribute("data-state", "rejected")
    expect(ui.page.get_by_text("User skipped the question")).to_be_visible()  # the live waiter got the rejection
    ui.expect_icon(task, False)
    ui.shot("skipped")
    ui.close_task_list()
    assert [b["state"] for b in flow.bundles(session)] == ["rejected"]
    assert flow.summary(task)["pending_action"] is None


def _answer_late(ui: Ui, cid: str, option: str) -> None:
    entry = ui.entry(cid)
    expect(entry).to_contain_text("not waiting")
    expect(entry).not_to_contain_text("is waiting")
    entry.get_by_role("button", name="Answer as new message").click()
    form = entry.locator("form.late-form")
    form.get_by_label(option).first.check()
    form.get_by_role("button", name="Send as new message").click()


def test_late_answer__superseded_question__sent_or_queued_as_new_message(ui: Ui, flow: Flow) -> None:
    task = flow.task("Late answers")
    idle = flow.session(task, "[ask][wait:1] first question")
    busy = flow.session(task, "[ask][wait:1] second question")
    idle_cid, busy_cid = flow.asked(idle)[0], flow.asked(busy)[0]
    flow.detached_and_idle(idle)
    flow.detached_and_idle(busy)
    flow.send(idle, "moving on")  # a newer turn supersedes the question; the echo ends it: idle again
    flow.send(busy, "[hang] longer work")  # a newer turn that stays open: a new message waits in the queue
    eventually(lambda: flow.turn_closed(idle) and flow.state(busy) == "RUNNING" or None, "sessions settled")

    ui.goto(session_route(task, idle))
    expect(ui.entry(idle_cid)).to_have_attribute("data-state", "superseded")
    expect(ui.overlay()).to_have_count(0)
    ui.shot("superseded")
    _answer_late(ui, idle_cid, "Option B")
    expect(ui.entry(idle_cid).locator('[data-admission="sent"]')).to_contain_text("Sent")
    expect(ui.page.get_by_text("Answering your earlier question").first).to_be_visible()
    ui.shot("late-sent")

    ui.page.evaluate("route => { location.hash = route; }", session_route(task, busy))
    expect(ui.entry(busy_cid)).to_have_attribute("data-state", "superseded")
    _answer_late(ui, busy_cid, "Option A")
    expect(ui.entry(busy_cid).locator('[data-admission="queued"]')).to_contain_text("Queued")
    ui.shot("late-queued")

    for session, cid in ((idle, idle_cid), (busy, busy_cid)):
        bundle = next(b for b in flow.bundles(session) if b["clarification_id"] == cid)
        assert bundle["state"] == "superseded" and not bundle["answerable"]  # never reopened
        assert bundle["late_answer_message_id"] and not bundle["late_answer_allowed"]


def test_late_answer__inactive_result__answers_kept_and_sent_as_message(ui: Ui, flow: Flow,
                                                                         pump: PumpThread) -> None:
    task = flow.task("Stale tab")
    session = flow.session(task, "[ask][wait:1] detached question")
    cid = flow.asked(session)[0]
    flow.detached_and_idle(session)  # still active: answering it would resume the agent
    ui.expect_icon(task, True)
    ui.activate(task, flow)
    ui.wait_route(session_route(task, session))
    expect(ui.overlay()).to_contain_text("stopped waiting")

    pump.pause()  # the client does not hear about the newer turn: its overlay goes stale
    assert flow.send(session, "[hang] newer work")["admission"] == "sent"
    ui.overlay().get_by_label("Option A").check()
    ui.shot("stale-overlay")
    ui.overlay().get_by_role("button", name="Submit answers").click()

    # 409 clarification_inactive: the answer continues as an ordinary message, never as tool delivery
    expect(ui.entry(cid).locator("[data-admission]")).to_contain_text("Queued")
    pump.resume()
    expect(ui.overlay()).to_have_count(0)
    expect(ui.entry(cid)).to_have_attribute("data-state", "superseded")
    expect(ui.entry(cid)).not_to_contain_text("Answer delivered")
    expect(ui.page.get_by_text("[hang] newer work")).to_be_visible()  # the client converges on what it missed
    ui.expect_icon(task, False)
    ui.close_task_list()
    ui.shot("answer-queued")
    bundle = flow.bundles(session)[0]
    assert bundle["late_answer_message_id"]
    assert all(q["response"] is None for q in bundle["questions"])  # the tool request was not answered


def test_stale_question__skip_newer_then_reload__icon_never_returns(ui: Ui, flow: Flow) -> None:
    task = flow.task("Stale question")
    session = flow.session(task, "[ask][wait:1] older question")
    old_cid = flow.asked(session)[0]
    flow.detached_and_idle(session)
    flow.send(session, "[ask] newer question")
    new_cid = [c for c in flow.asked(session, 2) if c != old_cid][0]

    ui.expect_icon(task, True)
    ui.activate(task, flow)
    ui.wait_route(session_route(task, session))
    expect(ui.overlay()).to_have_attribute("data-clarification-id", new_cid)  # only the active bundle
    expect(ui.entry(old_cid)).to_have_attribute("data-state", "superseded")
    ui.shot("newer-overlay")
    ui.overlay().get_by_role("button", name=re.compile("^Skip")).click()
    expect(ui.overlay()).to_have_count(0)
    ui.expect_icon(task, False)
    ui.close_task_list()

    ui.reload()
    ui.expect_icon(task, False)
    ui.page.wait_for_timeout(1500)  # give the event feed's catch-up every chance to resurrect it
    ui.expect_icon(task, False)
    ui.shot("after-reload-list")
    ui.close_task_list()
    expect(ui.overlay()).to_have_count(0)
    expect(ui.entry(old_cid)).to_contain_text("not waiting")
    expect(ui.entry(old_cid).get_by_role("button", name="Answer as new message")).to_be_visible()
    ui.shot("after-reload-chat")
    assert flow.summary(task)["pending_action"] is None

    count = len(flow.messages(session))
    ui.entry(old_cid).get_by_role("button", name=re.compile("^Dismiss")).click()  # closing sends nothing
    expect(ui.entry(old_cid)).to_contain_text("Kept in history")  # the server's dismissed flag
    expect(ui.entry(old_cid).get_by_role("button")).to_have_count(0)
    ui.shot("dismissed")
    entry = next(b for b in flow.bundles(session) if b["clarification_id"] == old_cid)
    assert entry["dismissed"] and entry["state"] == "superseded" and not entry["late_answer_allowed"]
    assert len(flow.messages(session)) == count
    assert flow.summary(task)["pending_action"] is None


def test_late_answer__session_unavailable__answer_kept_and_retry_reuses_identity(ui: Ui, flow: Flow) -> None:
    task = flow.task("Ended session")
    session = flow.session(task, "[ask][wait:1] question")
    cid = flow.asked(session)[0]
    flow.detached_and_idle(session)
    assert flow.user.post(f"/sessions/{session}/cancel").status_code == 200  # terminal: the question expires
    sent: list[dict[str, Any]] = []
    ui.page.on("request", lambda r: sent.append(r.post_data_json) if r.method == "POST"
               and r.url.endswith(f"/sessions/{session}/messages") else None)

    ui.goto(session_route(task, session))
    expect(ui.entry(cid)).to_have_attribute("data-state", "expired")
    _answer_late(ui, cid, "Option A")
    failure = ui.entry(cid).get_by_role("alert")
    expect(failure).to_contain_text("Not sent")
    expect(failure).to_contain_text("Your answer is kept")
    expect(ui.entry(cid).get_by_label("Option A").first).to_be_checked()
    ui.shot("admission-failed")
    failure.get_by_role("button", name="Retry").click()
    eventually(lambda: len(sent) == 2, "the retried admission")
    expect(ui.entry(cid).get_by_role("alert")).to_contain_text("Not sent")
    ui.shot("retry-failed")
    assert sent[0]["client_message_id"] == sent[1]["client_message_id"]  # one identity: no duplicate message
    assert sent[0]["in_reply_to"] == {"clarification_id": cid,
                                      "answers": [{"question_id": "q1", "selected_options": ["a"]}]}
    assert not [m for m in flow.messages(session) if "earlier question" in (m.get("content") or "")]
