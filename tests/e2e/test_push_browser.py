"""The service worker's Web Push section in Chromium: what Clarify pushes (built and encrypted by the real push
function, decrypted by the local push service) is delivered to the worker through the DevTools protocol
(`ServiceWorker.deliverPushMessage`); the notification is shown, a tap opens the session, and an option's action
answers the question once, however often it is tapped.

Headless Chromium shows no notification UI and cannot click one: taps are `notificationclick` events dispatched
inside the worker (Playwright evaluates there), carrying the real notification `getNotifications()` returned.
"""
from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from scripts.local.handlers import LambdaContext
from scripts.local.stack import LocalStack
from tests.support.browser import UI_TIMEOUT, Flow, PumpThread, new_context, session_route, until_js
from tests.support.push_service import PushService
from tests.support.wait import eventually

try:
    from playwright.sync_api import Browser, Page, Worker
except ImportError:  # reported by the browser fixture
    pass


SHOWN = "async () => (await (await navigator.serviceWorker.ready).getNotifications()).length"


@pytest.fixture
def push() -> Iterator[PushService]:
    service = PushService().start()
    yield service
    service.stop()


def pushed_payload(stack: LocalStack, flow: Flow, push: PushService, workspace: str, task: str,
                   session: str, cid: str) -> dict[str, Any]:
    """What the push function sends for this question to a device of the workspace, as the device decrypts it."""
    device = push.subscribe()
    assert flow.user.post("/devices", device.json("test")).status_code in (200, 201)
    detail = {"type": "message.added", "workspace_id": workspace, "task_id": task, "session_id": session,
              "payload": {"type": "clarification", "clarification_id": cid}}
    report = stack.app.push_delivery({"detail": detail}, LambdaContext("push_delivery"))
    assert report["sent"] == 1, report
    [payload] = device.delivered()
    return payload


def open_app(browser: Browser, stack: LocalStack, workspace: str) -> tuple[Any, Page, Worker, str]:
    """A signed-in page whose service worker is active and holds the page's token, as push.js leaves it on a
    device that turned push on; returns (context, page, worker, the registration's id)."""
    context = new_context(browser, "phone", permissions=["notifications"])
    page = context.new_page()
    token = stack.user_token(workspace=workspace)
    page.goto(f"{stack.url}/#token={token}")
    until_js(page, "async () => !!(await navigator.serviceWorker.ready).active", "an active service worker")
    page.evaluate("() => localStorage.setItem('clarify.push.device', 'dev-this-browser')")  # push is on here
    page.reload()
    until_js(page, "async () => (await (await caches.open('clarify-push-v1')).match('/push/token'))?.text()",
             "the token kept for the worker")
    worker = context.service_workers[0] if context.service_workers else context.wait_for_event("serviceworker")
    cdp = context.new_cdp_session(page)
    registrations: list[dict[str, Any]] = []
    cdp.on("ServiceWorker.workerRegistrationUpdated", lambda e: registrations.extend(e["registrations"]))
    cdp.send("ServiceWorker.enable")
    def registered() -> list[dict[str, Any]]:
        page.wait_for_timeout(50)  # CDP events reach the callback only while Playwright runs its event loop
        return [r for r in registrations if r["scopeURL"] == f"{stack.url}/" and not r["isDeleted"]]
    registration = eventually(registered, "the page's service worker registration", timeout=UI_TIMEOUT / 1000)[-1]
    context.cdp = cdp  # kept for deliver()
    return context, page, worker, registration["registrationId"]


def deliver(context: Any, stack: LocalStack, registration: str, payload: dict[str, Any]) -> None:
    context.cdp.send("ServiceWorker.deliverPushMessage", {"origin": stack.url, "registrationId": registration,
                                                          "data": json.dumps(payload)})


def deliver_until_shown(context: Any, stack: LocalStack, registration: str, page: Page,
                        payload: dict[str, Any], check: str) -> None:
    """Delivers the push, again every 2 s (the same tag: still one notification) until `check` holds in the page:
    a worker that is still starting may miss the first delivery on a loaded machine."""
    deadline = time.monotonic() + UI_TIMEOUT / 1000
    while True:
        deliver(context, stack, registration, payload)
        try:
            until_js(page, check, "the pushed notification", timeout=2)
            return
        except AssertionError:
            assert time.monotonic() < deadline, f"no notification for {payload}"


def notifications(page: Page) -> list[dict[str, Any]]:
    return list(page.evaluate("""async () => (await (await navigator.serviceWorker.ready).getNotifications())
        .map(n => ({title: n.title, body: n.body, tag: n.tag, data: n.data, renotify: n.renotify,
                    actions: n.actions.map(a => ({action: a.action, title: a.title}))}))"""))


def tap(worker: Worker, action: str = "", times: int = 1) -> None:
    """Taps on the shown notification (or on one of its actions), as the platform would dispatch them."""
    worker.evaluate("""async ([action, times]) => {
        const [notification] = await self.registration.getNotifications();
        for (let i = 0; i < times; i++) {
            self.dispatchEvent(new NotificationEvent('notificationclick', {notification, action}));
        }
    }""", [action, times])


@dataclass
class Shown:
    """A question asked, pushed, and its notification shown in a signed-in browser."""
    task: str
    session: str
    cid: str
    payload: dict[str, Any]
    page: Page
    worker: Worker
    registration: str
    context: Any


@contextmanager
def shown(browser: Browser, stack: LocalStack, flow: Flow, push: PushService, workspace: str, title: str,
          prompt: str) -> Iterator[Shown]:
    task = flow.task(title)
    session = flow.session(task, prompt)
    [cid] = flow.asked(session)
    payload = pushed_payload(stack, flow, push, workspace, task, session, cid)
    context, page, worker, registration = open_app(browser, stack, workspace)
    try:
        deliver_until_shown(context, stack, registration, page, payload, SHOWN)
        yield Shown(task, session, cid, payload, page, worker, registration, context)
    finally:
        context.close()


def test_push__notification_shown_tap_opens_the_session(browser: Browser, web_stack: LocalStack, flow: Flow,
                                                        workspace: str, pump: PumpThread,
                                                        push: PushService) -> None:
    with shown(browser, web_stack, flow, push, workspace, "Push to my phone",
               "[ask] a question for the phone") as shot:
        task, session, payload, page, worker = shot.task, shot.session, shot.payload, shot.page, shot.worker
        context, registration = shot.context, shot.registration
        [n] = notifications(page)
        assert (n["title"], n["body"], n["tag"]) == ("Push to my phone", "Pick an option for question 1",
                                                     f"session-{session}")
        assert n["actions"] == [{"action": "a", "title": "Option A"}, {"action": "b", "title": "Option B"}]
        # A newer question of the same session replaces the notification (one per session) and alerts again.
        deliver_until_shown(context, web_stack, registration, page,
                            {**payload, "clarification_id": "newer", "question": "And now?"},
                            "async () => (await (await navigator.serviceWorker.ready).getNotifications())"
                            ".some(n => n.body === 'And now?')")
        [n] = notifications(page)
        assert n["tag"] == f"session-{session}" and n["renotify"] is True
        tap(worker)
        page.wait_for_function("route => location.hash === route", arg=session_route(task, session))


def test_push__option_action__answers_once_even_tapped_twice(browser: Browser, web_stack: LocalStack, flow: Flow,
                                                            workspace: str, pump: PumpThread,
                                                            push: PushService) -> None:
    with shown(browser, web_stack, flow, push, workspace, "Answer from the lock screen",
               "[ask] a question to answer from the notification") as shot:
        session, cid, page, worker = shot.session, shot.cid, shot.page, shot.worker
        worker.evaluate("""() => { self.__answers = []; const real = self.fetch.bind(self);
            self.fetch = (url, init) => real(url, init).then((r) => { if (String(url).endsWith('/respond'))
                self.__answers.push([r.status, init.headers['Idempotency-Key']]); return r; }); }""")
        tap(worker, "b", times=2)  # a double tap: the same Idempotency-Key
        [bundle] = eventually(lambda: [b for b in flow.bundles(session)
                                       if b["clarification_id"] == cid and b["state"] == "answered"],
                              "the question answered from the notification", timeout=UI_TIMEOUT / 1000)
        assert bundle["questions"][0]["response"]["selected_options"] == ["b"]
        assert len(notifications(page)) == 0  # the tapped notification closed
        def both_taps() -> list[Any] | None:
            sent = worker.evaluate("() => self.__answers")
            return sent if len(sent) >= 2 else None
        answers = eventually(both_taps, "both taps' respond requests", timeout=UI_TIMEOUT / 1000)
        # Both taps sent the answer with one key: the first answered, the other got the same outcome (200) or
        # found it in flight (409 conflict); either way the worker stops there.
        assert {key for _, key in answers} == {f"push:{cid}"} and 200 in [s for s, _ in answers], answers
        assert {s for s, _ in answers} <= {200, 409}, answers
        # One answer: a second answer with another option is refused, the first one stands.
        again = flow.user.post(f"/clarifications/{cid}/respond",
                               {"answers": [{"question_id": "q1", "selected_options": ["a"]}]})
        assert again.status_code == 409


def test_sign_out__removes_this_devices_push_registration_and_token(browser: Browser, web_stack: LocalStack,
                                                                    flow: Flow, workspace: str,
                                                                    push: PushService) -> None:
    device = push.subscribe()
    registered = flow.user.post("/devices", device.json("this browser"))
    assert registered.status_code == 201, registered.text
    context, page, _, _ = open_app(browser, web_stack, workspace)
    try:
        page.evaluate("id => localStorage.setItem('clarify.push.device', id)", registered.json()["device_id"])
        with page.expect_navigation():  # sign-out reloads the page once it is done
            page.locator("[data-action=sign-out]").first.click()
        eventually(lambda: not flow.user.get("/devices").json()["devices"], "the device removed at sign-out",
                   timeout=UI_TIMEOUT / 1000)
        until_js(page, "async () => !(await caches.has('clarify-push-v1'))"
                       " && !localStorage.getItem('clarify.push.device')", "the worker's token gone")
    finally:
        context.close()
