"""Helpers of the browser tests (their fixtures are in tests/e2e/conftest.py): Debian's chromium driven by
Playwright against one in-process local stack per module (tables are costly), each test in its own workspace so
tests never see each other's tasks.

Viewports: a 1366x850 desktop and a 390x844 phone with touch. Screenshots of each step go to
artifacts/screenshots/tests/ (scripts/screenshots makes the curated set for the README).
"""
from __future__ import annotations

import re
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from scripts.local.api_server import ApiThread
from scripts.local.sim_agent import SimAgent
from scripts.local.stack import LocalStack
from tests.support.flow import ApiClient
from tests.support.wait import eventually

UI_TIMEOUT = 30_000  # ms: generous for a loaded 2-core machine (15 s was once too short for a send under four
#                     workers); every wait is for a state, never a fixed time
try:
    from playwright.sync_api import Browser, BrowserContext, Locator, Page, expect

    expect.set_options(timeout=UI_TIMEOUT)  # assertions wait as long as actions (Playwright's own default: 5 s)
except ImportError:  # reported by the browser fixture (tests/e2e/conftest.py)
    pass

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "artifacts" / "screenshots" / "tests"
# The Skip's undo window, read from the client itself so a change there cannot leave the hold below behind.
SKIP_UNDO_MS = int(re.search(r"const SKIP_UNDO_MS = (\d+);", (ROOT / "chalicelib/web/app.js").read_text())[1])
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
VIEWPORTS: dict[str, dict[str, Any]] = {
    "desktop": {"viewport": {"width": 1366, "height": 850}},
    "phone": {"viewport": {"width": 390, "height": 844}, "has_touch": True, "is_mobile": True},
}


class PumpThread:
    """Runs the stream functions continuously, like Lambda's event source mapping; pausable."""

    def __init__(self, stack: LocalStack) -> None:
        assert stack.pump is not None
        self.pump = stack.pump
        self._lock = threading.Lock()
        self._paused = False
        self._all: list[Any] | None = None
        self._stop = threading.Event()
        self.failures: list[str] = []  # passes that failed (each tried again), for a failing test's report
        self._thread = threading.Thread(target=self._run, daemon=True, name="browser-test-pump")

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with self._lock:
                    handled = 0 if self._paused else self.pump.poll_once()
            except Exception as error:  # noqa: BLE001 - as the stack's own pump: a failed pass is tried again
                self.failures.append(repr(error))
                handled = 0
            if handled == 0:
                self._stop.wait(0.1)  # an idle pass costs emulator CPU the browser tests share

    def start(self) -> PumpThread:
        self._thread.start()
        return self

    def pause(self) -> None:
        with self._lock:  # waits out a pass in progress
            self._paused = True

    def pause_sessions_stream(self) -> None:
        """Only the session aggregates' stream stops: history (written directly, e.g. agent output) still flows."""
        with self._lock:
            self._all = self.pump.targets
            self.pump.targets = [t for t in self._all if not t.table.endswith("sessions")]

    def resume(self) -> None:
        with self._lock:
            self._paused = False
            if self._all is not None:
                self.pump.targets, self._all = self._all, None

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


# Each violation of the page's Content-Security-Policy, as the browser reports it to the page (the event) and
# to its console; recorded from the first document of the page on, reloads included.
_CSP_LISTENER = """
document.addEventListener("securitypolicyviolation", (e) => window.__cspViolation(
  `${e.effectiveDirective} blocked ${e.blockedURI || "inline"} at ${e.sourceFile}:${e.lineNumber}`));
"""


def watch_csp(page: Page) -> list[str]:
    violations: list[str] = []
    page.expose_binding("__cspViolation", lambda _source, text: violations.append(str(text)))
    page.add_init_script(_CSP_LISTENER)
    page.on("console", lambda msg: violations.append(msg.text)
            if "Content Security Policy" in msg.text else None)
    return violations


def new_context(browser: Browser, viewport: str, **extra: Any) -> BrowserContext:
    context = browser.new_context(**VIEWPORTS[viewport], device_scale_factor=1, **extra)
    context.set_default_timeout(UI_TIMEOUT)
    return context


# ------------------------------------------------------------------ the client, from a user's point of view
class Ui:
    def __init__(self, page: Page, stack: LocalStack, viewport: str, name: str, workspace: str) -> None:
        self.page, self.stack, self.viewport, self.name, self.workspace = page, stack, viewport, name, workspace
        self.step = 0
        self.errors: list[str] = []
        page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        self.csp_violations = watch_csp(page)
        SHOTS.mkdir(parents=True, exist_ok=True)

    @property
    def phone(self) -> bool:
        return self.viewport == "phone"

    @property
    def token(self) -> str:
        return self.stack.user_token(workspace=self.workspace)

    def goto(self, route: str = "#/") -> None:
        self.page.goto(f"{self.stack.url}/#token={self.token}")
        expect(self.page.locator(".task-panel, #open-sheet").first).to_be_visible()
        if route != "#/":
            self.page.evaluate("route => { location.hash = route; }", route)
            self.wait_route(route)

    def reload(self) -> None:
        self.page.reload()
        expect(self.page.locator("#topbar")).to_be_visible()

    @contextmanager
    def undo_window_held(self) -> Iterator[None]:
        """The Skip's undo window (a 5-second page timer) stays open while the test looks at it: an audit or
        a screenshot on a loaded machine may take longer than that. Timers of other lengths are untouched."""
        self.page.evaluate("""ms => {
            window.__clarifyTimeout ??= window.setTimeout;
            window.setTimeout = (fn, delay, ...rest) =>
                window.__clarifyTimeout(fn, delay === ms ? 2147483647 : delay, ...rest);
        }""", SKIP_UNDO_MS)
        try:
            yield
        finally:
            self.page.evaluate("() => { window.setTimeout = window.__clarifyTimeout; }")

    def shot(self, label: str) -> Path:
        self.step += 1
        path = SHOTS / f"{self.name}-{self.step:02d}-{label}.png"
        self.page.screenshot(path=str(path))
        return path

    def route(self) -> str:
        return str(self.page.evaluate("location.hash"))

    def wait_route(self, route: str) -> None:
        self.page.wait_for_function("route => location.hash === route", arg=route)

    def until(self, check: Callable[[], Any], what: str, timeout: float = UI_TIMEOUT / 1000) -> Any:
        """Like eventually(), but lets the page's events reach Playwright's handlers while it waits."""
        deadline = time.monotonic() + timeout
        while True:
            value = check()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            self.page.wait_for_timeout(50)

    def long_polls(self) -> list[str]:
        """From now on: the URLs of the feed's long-polls (it issues one once it has caught up)."""
        polls: list[str] = []
        self.page.on("request", lambda r: polls.append(r.url) if "/events?after=" in r.url and "wait=10" in r.url
                     else None)
        return polls

    def tap(self, locator: Locator) -> None:
        """A finger on the phone, the mouse on the desktop."""
        if self.phone:
            locator.tap()
        else:
            locator.click()

    # task list: the sidebar on the desktop, the bottom sheet on the phone
    def task_list(self) -> Locator:
        if self.phone:
            if not self.page.locator("#task-sheet").is_visible():
                self.page.locator("#open-sheet").tap()
            return self.page.locator("#task-sheet")
        return self.page.locator("#sidebar")

    def close_task_list(self) -> None:
        if self.phone and self.page.locator("#task-sheet").is_visible():
            self.page.locator("#task-sheet").get_by_role("button", name="Close").tap()
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
        self.tap(self.task_row(task_id))

    def overlay(self) -> Locator:
        return self.page.locator("#overlay")

    def composer(self) -> Locator:
        return self.page.locator("#composer-input")

    def entry(self, clarification_id: str) -> Locator:
        return self.page.locator(f'li.clar[data-clarification-id="{clarification_id}"]')

    def skip(self) -> None:
        """Skip, then confirm at once instead of waiting out the undo window."""
        self.overlay().get_by_role("button", name=re.compile("^Skip")).click()
        self.overlay().get_by_role("button", name="Skip now").click()


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

    def tasks(self) -> list[dict[str, Any]]:
        return list(self.user.get("/tasks").json()["tasks"])

    def summary(self, task_id: str) -> dict[str, Any]:
        tasks = {t["id"]: t for t in self.tasks()}
        return dict(tasks[task_id]["status_summary"])

    def settled_summary(self, task_id: str) -> dict[str, Any]:
        """The task summary once two reads a moment apart agree (stream processing has caught up)."""
        def stable() -> dict[str, Any] | None:
            first = self.summary(task_id)
            time.sleep(0.2)
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

    def idle(self, session_id: str) -> None:
        eventually(lambda: self.turn_closed(session_id) and self.state(session_id) == "IDLE" or None,
                   f"session {session_id} idle")

    def detached_and_idle(self, session_id: str) -> None:
        """Waits until the agent gave up waiting ([wait:S]) and finished its turn (the question stays active)."""
        eventually(lambda: all(b["agent_disconnected"] for b in self.bundles(session_id))
                   and self.turn_closed(session_id) or None, f"session {session_id} detached and idle")


def until_js(page: Page, script: str, what: str, timeout: float = UI_TIMEOUT / 1000) -> Any:
    """Evaluates an (async) script until it returns something truthy; page.wait_for_function does not await."""
    deadline = time.monotonic() + timeout
    while True:
        value = page.evaluate(script)
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        page.wait_for_timeout(50)


def restart_api(stack: LocalStack) -> Callable[[], None]:
    """Stops the API (its port refuses connections) and returns a function that starts it again on that port."""
    assert stack.api is not None
    port = stack.api.server.server.server_port
    stack.api.stop()

    def start() -> None:
        stack.api = ApiThread(stack.app.app, port=port).start()
    return start
