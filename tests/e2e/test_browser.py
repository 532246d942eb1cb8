"""The web client's clarification flows in a real browser (Debian's chromium driven by Playwright) against the
real local stack with the simulated agent, at desktop and phone sizes (fixtures: tests/support/browser.py).

The stream pump runs in a background thread so the client's /events long-poll converges; a test that needs
the client to miss a change pauses it.
"""
from __future__ import annotations

import re
from typing import Any

import pytest

from tests.support.browser import Flow, PumpThread, Ui, eventually, session_route

try:
    from playwright.sync_api import expect
except ImportError:  # reported by the browser fixture
    pass

pytestmark = pytest.mark.timeout(300)


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

    ui.skip()
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

    # The client does not hear about the newer turn: no events, and a transcript refresh already on its way
    # (an earlier event) cannot reach the server either. Its overlay goes stale.
    pump.pause()
    stale = "**/sessions/*/transcript*"
    ui.page.route(stale, lambda route: route.abort())
    assert flow.send(session, "[hang] newer work")["admission"] == "sent"
    ui.overlay().get_by_label("Option A").check()
    ui.shot("stale-overlay")
    ui.overlay().get_by_role("button", name="Submit answers").click()

    # 409 clarification_inactive: the answer continues as an ordinary message, never as tool delivery
    expect(ui.entry(cid).locator("[data-admission]")).to_contain_text("Queued")
    ui.page.unroute(stale)
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
    ui.skip()
    expect(ui.overlay()).to_have_count(0)
    ui.expect_icon(task, False)
    ui.close_task_list()

    polls = ui.long_polls()
    ui.reload()
    ui.expect_icon(task, False)
    ui.until(lambda: polls, "the feed caught up (its long-poll waits for news)")
    ui.expect_icon(task, False)  # and nothing resurrected the icon
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


def test_tab_title__counts_the_tasks_with_a_pending_question(ui: Ui, flow: Flow) -> None:
    expect(ui.page).to_have_title("Clarify")
    asked = []
    for name in ("Migrate billing", "Rename columns"):
        task = flow.task(name)
        session = flow.session(task, "[ask] which database?")
        asked.append((task, flow.asked(session)[0]))
        ui.expect_icon(task, True)  # live through /events
    expect(ui.page).to_have_title("(2) Clarify")

    skipped = flow.user.post(f"/clarifications/{asked[0][1]}/respond", {"rejected": True})  # answered elsewhere
    assert skipped.status_code == 200, skipped.text
    ui.expect_icon(asked[0][0], False)
    expect(ui.page).to_have_title("(1) Clarify")


def test_csp__an_inline_script__reported_as_a_violation(ui: Ui) -> None:
    """The listener every browser test ends on (tests/e2e/conftest.py) does hear the client's CSP."""
    ui.page.evaluate("""() => { const s = document.createElement("script");
                               s.textContent = "window.inlineRan = true"; document.body.append(s); }""")
    eventually(lambda: [v for v in ui.csp_violations if "inline" in v or "script-src" in v], timeout=10)
    assert ui.page.evaluate("() => window.inlineRan === undefined")
    ui.csp_violations.clear()
