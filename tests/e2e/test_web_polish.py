"""The web client's polish (issue 30) and its paging (issue 26), in a real browser at both sizes.

Each observed defect has a test here that fails on the client before it was fixed: the key hint typed into an
empty message box, "New task" at the bottom of the list, a message sent during an outage never resent, the
phone sheet focusing Search, the outage banner above a stale status, wording that said what did not happen;
and the keyboard journey. Paging: the task list and the transcript come a page at a time as you scroll, and the
pending question is on screen even when it is older than the page (fixtures: tests/support/browser.py).
"""
from __future__ import annotations

import re
from typing import Any

import pytest

from chalicelib import bootstrap
from chalicelib.domain.model import Message, Task
from scripts.local.stack import LocalStack
from tests.support.browser import Flow, PumpThread, Ui, eventually, new_context, session_route

try:
    from playwright.sync_api import Browser, Request, Route, expect
except ImportError:  # reported by the browser fixture
    pass

pytestmark = pytest.mark.timeout(300)

ACTIVE_IS_TEXT_FIELD = """() => { const el = document.activeElement;
  return !!el && (el.tagName === 'TEXTAREA' || (el.tagName === 'INPUT' && !['radio', 'checkbox'].includes(el.type))); }"""


def _user_messages(flow: Flow, session: str) -> list[str]:
    return [m["content"] for m in flow.messages(session) if m.get("author_type") == "user"]


def _idle_session(ui: Ui, flow: Flow, title: str) -> tuple[str, str]:
    task = flow.task(title)
    session = flow.session(task, "hello")
    flow.idle(session)
    ui.goto(session_route(task, session))
    expect(ui.page.get_by_text("Echo: hello")).to_be_visible()
    return task, session


# ------------------------------------------------------------------ the key hint answers, never types
def test_key_hint__empty_message_box_focused__1_2_ctrl_enter_answer_the_question(ui: Ui, flow: Flow) -> None:
    _, session = _idle_session(ui, flow, "Keys from the box")
    ui.composer().focus()  # focus sits in the empty, untouched message box
    flow.send(session, "[ask:2] two things")
    overlay = ui.overlay()
    expect(overlay).to_be_visible()
    expect(overlay.locator("input[type=radio]").first).to_be_focused()  # the first option, not the box
    assert not ui.page.evaluate(ACTIVE_IS_TEXT_FIELD)  # on the phone: no keyboard over the answer panel
    ui.page.keyboard.press("1")
    ui.page.keyboard.press("2")
    ui.page.keyboard.press("Control+Enter")
    expect(overlay).to_have_count(0)
    expect(ui.composer()).to_have_value("")
    bundle = eventually(lambda: [b for b in flow.bundles(session) if b["state"] == "answered"], "the answer")[0]
    assert [q["response"]["selected_options"] for q in bundle["questions"]] == [["a"], ["b"]]
    assert "12" not in _user_messages(flow, session)


def test_key_hint__text_typed_in_the_box__digits_stay_text(ui: Ui, flow: Flow) -> None:
    _, session = _idle_session(ui, flow, "Typing stays typing")
    flow.send(session, "[ask] one thing")
    expect(ui.overlay()).to_be_visible()
    ui.composer().click()
    ui.page.keyboard.type("version 12")
    expect(ui.composer()).to_have_value("version 12")
    expect(ui.overlay().locator("input[type=radio]:checked")).to_have_count(0)


# ------------------------------------------------------------------ the keyboard journey
def test_keyboard_journey__two_question_bundle_answered_with_keys_only(ui: Ui, flow: Flow) -> None:
    _, session = _idle_session(ui, flow, "Keys only")
    ui.page.locator("#main").focus()  # nowhere in particular: no text field
    flow.send(session, "[ask:2] two things")
    overlay = ui.overlay()
    first = overlay.get_by_role("group").nth(0)
    second = overlay.get_by_role("group").nth(1)
    expect(first.locator("input[type=radio]").first).to_be_focused()
    ui.page.keyboard.press("ArrowDown")  # a radio group: the arrow moves and picks
    expect(first.get_by_label("Option B")).to_be_checked()
    ui.page.keyboard.press("Tab")
    expect(first.get_by_label("Other answer")).to_be_focused()
    ui.page.keyboard.press("Tab")
    expect(second.locator("input[type=radio]").first).to_be_focused()
    ui.page.keyboard.press("Space")
    expect(second.get_by_label("Option A")).to_be_checked()
    ui.page.keyboard.press("Tab")
    ui.page.keyboard.press("Tab")
    expect(overlay.get_by_role("button", name="Submit answers")).to_be_focused()
    ui.shot("keys-only")
    ui.page.keyboard.press("Enter")
    expect(overlay).to_have_count(0)
    bundle = eventually(lambda: [b for b in flow.bundles(session) if b["state"] == "answered"], "the answer")[0]
    assert [q["response"]["selected_options"] for q in bundle["questions"]] == [["b"], ["a"]]


# ------------------------------------------------------------------ "New task" at the top
def test_new_task__at_the_top_of_the_list__with_60_tasks(ui: Ui, flow: Flow, workspace: str) -> None:
    deps = bootstrap.deps()
    for n in range(60):
        deps.store.put_task(Task(id=deps.new_id(), workspace_id=workspace, title=f"Backlog {n:02d}",
                                 workflow_step="todo", created_at=deps.now()))
    ui.goto()
    panel = ui.task_list()
    expect(panel.locator(".task-row").first).to_be_visible()
    field = panel.get_by_label("New task")
    button = panel.get_by_role("button", name="New task")
    expect(field).to_be_in_viewport()
    expect(button).to_be_in_viewport()
    top = panel.locator(".task-row").first.bounding_box()
    assert top is not None and field.bounding_box()["y"] < top["y"]  # type: ignore[index]
    ui.shot("new-task-on-top")
    field.fill("Started from the top")
    ui.tap(button)
    expect(ui.page.locator("#task-name")).to_have_text("Started from the top")


# ------------------------------------------------------------------ a message sent during an outage is resent
def test_outage__not_confirmed_message__resent_on_reconnect_once(ui: Ui, flow: Flow) -> None:
    _, session = _idle_session(ui, flow, "Outage send")

    def outage(route: Route) -> None:
        if route.request.method == "POST" and route.request.url.endswith("/messages"):
            route.fetch()  # the server stores it; the answer is lost on the way back
        route.abort()
    context = ui.page.context  # the context's routes also see what passes the service worker
    context.route("**/api/v1/**", outage)
    ui.composer().fill("written during the outage")
    ui.composer().press("Enter")
    echo = ui.page.locator("li.msg.echo", has_text="written during the outage")
    expect(echo).to_contain_text("Not confirmed")
    expect(ui.page.locator("#banner")).to_contain_text("can't be reached")
    ui.shot("not-confirmed")
    ids: list[str] = []
    ui.page.on("request", lambda r: ids.append(r.post_data_json["client_message_id"])
               if r.method == "POST" and r.url.endswith("/messages") else None)
    context.unroute("**/api/v1/**")
    expect(ui.page.locator("li.msg.echo")).to_have_count(0)  # confirmed, then replaced by the server's copy
    expect(ui.page.get_by_text("Echo: written during the outage")).to_be_visible()
    assert len(set(ids)) == 1, ids
    assert _user_messages(flow, session).count("written during the outage") == 1


# ------------------------------------------------------------------ the phone sheet opens on the list, not the keyboard
def test_phone_sheet__opens_without_focusing_a_text_field(browser: Browser, web_stack: LocalStack, flow: Flow,
                                                          workspace: str, pump: PumpThread) -> None:
    flow.task("One task")
    context = new_context(browser, "phone")
    try:
        ui = Ui(context.new_page(), web_stack, "phone", "sheet-focus-phone", workspace)
        ui.goto()
        ui.page.locator("#open-sheet").tap()
        expect(ui.page.locator("#task-sheet .task-row")).to_have_count(1)
        expect(ui.page.locator("#task-sheet")).to_be_focused()
        assert not ui.page.evaluate(ACTIVE_IS_TEXT_FIELD)
        ui.shot("sheet-open")
        ui.page.keyboard.press("Escape")
        expect(ui.page.locator("#task-sheet")).to_have_count(0)
        expect(ui.page.locator("#open-sheet")).to_be_focused()
    finally:
        context.close()


# ------------------------------------------------------------------ the outage banner where the status was
def test_outage_banner__in_a_conversation__replaces_the_stale_status(ui: Ui, flow: Flow) -> None:
    _idle_session(ui, flow, "Banner place")
    expect(ui.page.locator("#status-line")).to_contain_text("send a message to continue")
    ui.page.context.route("**/api/v1/**", lambda route: route.abort())
    banner = ui.page.locator("#banner")
    expect(banner).to_contain_text("can't be reached")
    expect(banner).to_be_in_viewport()
    expect(ui.page.get_by_text("send a message to continue")).to_have_count(0)  # not a status from before
    task_head = ui.page.locator("#task-name").bounding_box()
    assert task_head is not None and banner.bounding_box()["y"] > task_head["y"]  # type: ignore[index]
    ui.shot("outage-in-conversation")
    ui.page.context.unroute("**/api/v1/**")
    expect(ui.page.locator("#status-line")).to_contain_text("send a message to continue")


# ------------------------------------------------------------------ words that say what happened
def test_wording__answered_elsewhere_without_submit__no_false_claims(ui: Ui, flow: Flow) -> None:
    task = flow.task("Wording")
    session = flow.session(task, "[ask] which one?")
    cid = flow.asked(session)[0]
    ui.goto(session_route(task, session))
    ui.overlay().get_by_label("Option A").check()  # a draft, never submitted
    question = flow.bundles(session)[0]["questions"][0]["question_id"]
    resp = flow.user.post(f"/clarifications/{cid}/respond",
                          {"answers": [{"question_id": question, "selected_options": ["b"]}]})
    assert resp.status_code == 200, resp.text
    entry = ui.entry(cid)
    expect(entry).to_have_attribute("data-state", "answered")
    expect(entry.locator(".lost-draft")).to_contain_text("answered elsewhere")
    expect(entry).not_to_contain_text("before you sent yours")
    expect(entry.locator(".clar-state")).to_have_text("Answered")
    expect(entry).not_to_contain_text("Answered.")  # the badge says it once
    ui.shot("answered-elsewhere")


def _requests(ui: Ui, pattern: str) -> list[Request]:
    seen: list[Request] = []
    ui.page.on("request", lambda r: seen.append(r) if re.search(pattern, r.url) else None)
    return seen


def _query(url: str) -> dict[str, Any]:
    from urllib.parse import parse_qs, urlparse
    return {k: v[0] for k, v in parse_qs(urlparse(url).query).items()}
