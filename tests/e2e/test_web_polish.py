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
  return !!el && (el.tagName === 'TEXTAREA' || (el.tagName === 'INPUT' && !['radio', 'checkbox'].includes(el.type)));
}"""


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
    ui.page.context.on("request", lambda r: ids.append(r.post_data_json["client_message_id"])
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
    seen: list[Request] = []  # the context's: what passes the service worker too
    ui.page.context.on("request", lambda r: seen.append(r) if re.search(pattern, r.url) else None)
    return seen


def _query(url: str) -> dict[str, Any]:
    from urllib.parse import parse_qs, urlparse
    return {k: v[0] for k, v in parse_qs(urlparse(url).query).items()}


# ------------------------------------------------------------------ paging (issue 26): pages as you scroll
@pytest.mark.parametrize("viewport", ["desktop", "phone"])
def test_paging__120_tasks__first_page_then_more_as_the_list_scrolls(browser: Browser, web_stack: LocalStack,
                                                                     workspace: str, pump: PumpThread,
                                                                     viewport: str) -> None:
    deps = bootstrap.deps()
    for n in range(120):
        deps.store.put_task(Task(id=deps.new_id(), workspace_id=workspace, title=f"Paged task {n:03d}",
                                 workflow_step="todo", created_at=f"2026-01-01T00:{n // 60:02d}:{n % 60:02d}.000000Z"))
    context = new_context(browser, viewport, service_workers="block")  # a first visit: nothing kept from before
    try:
        ui = Ui(context.new_page(), web_stack, viewport, f"paging-tasks-{viewport}", workspace)
        lists = _requests(ui, r"/api/v1/tasks(\?|$)")
        ui.goto()
        ui.page.wait_for_function("() => window.clarify.state.tasksLoaded")
        rows = ui.task_list().locator(".task-row")
        expect(rows.first).to_have_text(re.compile("^Paged task 119"))  # the most recent first
        assert lists and all(_query(r.url).get("limit") == "50" for r in lists), [r.url for r in lists]
        assert rows.count() < 120, [r.url for r in lists]  # a page, not everything
        for _ in range(10):  # scroll to the end of what is shown until everything is there
            if rows.count() == 120:
                break
            count = rows.count()
            rows.last.scroll_into_view_if_needed()
            ui.until(lambda count=count: rows.count() > count, "the next page of tasks")
        expect(rows).to_have_count(120)
        expect(rows.last).to_have_text(re.compile("^Paged task 000"))
        cursors = [_query(r.url).get("cursor") for r in lists]
        assert cursors[0] is None and len(set(cursors[1:])) == len(cursors) - 1 >= 2, cursors  # each page once
        ui.shot("all-pages")
    finally:
        context.close()


def _seed_transcript(flow: Flow, workspace: str, session: str, count: int) -> None:
    """History messages as the stream function writes them (seeded directly: the client reads them)."""
    page = flow.user.get(f"/sessions/{session}/transcript").json()
    task = flow.user.get(f"/sessions/{session}").json()["task_id"]
    store = bootstrap.deps().store
    for n in range(count):
        store.put_message(Message(id=f"m-{n:05d}", session_id=session, workspace_id=workspace, task_id=task,
                                  turn_id=page["current_turn_id"], turn_seq=1, author_type="agent", type="message",
                                  content=f"Progress note {n:03d}",
                                  created_at=f"2030-01-01T00:{n // 60:02d}:{n % 60:02d}.000000Z"))


def test_paging__long_transcript__newest_page_older_on_scroll_pending_question_reachable(ui: Ui, flow: Flow,
                                                                                       workspace: str) -> None:
    task = flow.task("Long conversation")
    session = flow.session(task, "[ask] which store?")
    cid = flow.asked(session)[0]
    _seed_transcript(flow, workspace, session, 150)  # the question is now far older than a page
    reads = _requests(ui, r"/transcript")
    ui.goto(session_route(task, session))
    overlay = ui.overlay()
    expect(overlay).to_have_attribute("data-clarification-id", cid)  # reachable, though on no page loaded
    expect(ui.page.get_by_text("Progress note 149")).to_be_visible()
    expect(ui.entry(cid)).to_have_count(0)
    assert all(_query(r.url).get("limit") == "50" and "before" not in _query(r.url) for r in reads), reads
    shown = ui.page.locator("#transcript > li.msg")
    assert shown.count() <= 51, shown.count()
    ui.shot("newest-page")

    top = shown.first
    top_text = top.inner_text()
    older = ui.page.locator("#older-messages")
    older.scroll_into_view_if_needed()  # to the top of the conversation (on the phone the whole route scrolls)
    ui.until(lambda: any("before" in _query(r.url) for r in reads), "an older page read")
    ui.until(lambda: shown.count() > 51, "older messages shown")
    expect(ui.page.locator("#transcript li.msg", has_text=top_text.splitlines()[-1])).to_be_in_viewport()  # place kept
    for _ in range(10):  # on to the first message, page by page
        if ui.entry(cid).count():
            break
        before = shown.count()
        older.scroll_into_view_if_needed()
        ui.until(lambda before=before: shown.count() > before or ui.entry(cid).count(), "another older page")
    expect(ui.entry(cid)).to_have_class(re.compile(r"\bcollapsed\b"))  # in history: a pointer to the panel
    expect(ui.page.locator("#older-messages")).to_have_count(0)  # the first message is there
    befores = [_query(r.url).get("before") for r in reads if "before" in _query(r.url)]
    assert len(befores) == len(set(befores)) >= 2, befores  # each older page read once
    overlay.get_by_label("Option B").check()
    overlay.get_by_role("button", name="Submit answers").click()
    expect(overlay).to_have_count(0)
    whole = f"/sessions/{session}/transcript?limit=200"
    eventually(lambda: [m for m in flow.user.get(whole).json()["messages"]
                        if m.get("clarification_id") == cid and m["state"] == "answered"], "the answer recorded")


# ------------------------------------------------------------------ the visual standard
def test_look__reading_column_bubbles_code_copy_and_working_indicator(ui: Ui, flow: Flow) -> None:
    task = flow.task("Looks")
    session = flow.session(task, "hi")
    flow.idle(session)
    ui.goto(session_route(task, session))
    line = "x = compute(" + ", ".join(f"argument_{n}" for n in range(40)) + ")"
    ui.composer().fill(f"Try this:\n```python\n{line}\n```")
    ui.composer().press("Enter")
    reply = ui.page.locator("li.msg.agent", has_text="Echo: Try this")
    expect(reply.locator("pre")).to_be_visible()
    pre = reply.locator("pre")
    assert pre.evaluate("el => el.scrollWidth <= el.clientWidth"), "a long code line wraps: no sideways scroll"
    ui.page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    ui.tap(reply.get_by_role("button", name="Copy code"))
    assert ui.page.evaluate("() => navigator.clipboard.readText()") == line

    short = ui.page.locator("li.msg.agent", has_text="Echo: hi")
    log = ui.page.locator("#transcript").bounding_box()
    box = short.bounding_box()
    assert log is not None and box is not None
    column = min(760, log["width"] - 24)
    left = log["x"] + (log["width"] - column) / 2
    assert abs(box["x"] - left) < 16, (box, log)  # in the centred column
    assert box["width"] < 0.6 * column, box  # a short reply is a bubble, not a full-width card
    ui.shot("column")

    flow.send(session, "[hang] keep going")
    expect(ui.page.locator("#working")).to_be_visible()  # the agent works: said in the conversation
    ui.page.locator("#status-line").get_by_role("button", name="Stop the agent").click()
    ui.page.locator("#status-line").get_by_role("button", name="Stop session").click()
    expect(ui.page.locator("#working")).to_have_count(0)


def test_look__phone_question_panel_one_scroll_area_title_whole(browser: Browser, web_stack: LocalStack,
                                                                 flow: Flow, workspace: str, pump: PumpThread) -> None:
    task = flow.task("Pick the session store for the billing API")
    session = flow.session(task, "[ask:2] two things")
    flow.asked(session)
    context = new_context(browser, "phone")
    try:
        ui = Ui(context.new_page(), web_stack, "phone", "one-scroll-phone", workspace)
        ui.goto(session_route(task, session))
        overlay = ui.overlay()
        expect(overlay).to_be_visible()
        assert overlay.evaluate("el => el.scrollHeight <= el.clientHeight + 1"), "no scroll area inside the page"
        name = ui.page.locator("#task-name")
        assert name.evaluate("el => el.scrollWidth <= el.clientWidth"), "the task title is not cut"
        legend = overlay.locator("legend").first.bounding_box()
        group = overlay.get_by_role("group").first.bounding_box()
        assert legend is not None and group is not None and legend["y"] >= group["y"], (legend, group)  # inside
        second = overlay.get_by_role("group").nth(1).get_by_label("Option B")
        second.scroll_into_view_if_needed()
        expect(second).to_be_in_viewport()
        second.tap()
        expect(second).to_be_checked()
        overlay.get_by_role("group").nth(0).get_by_label("Option A").tap()
        submit = overlay.get_by_role("button", name="Submit answers")
        submit.scroll_into_view_if_needed()
        expect(submit).to_be_in_viewport()
        ui.shot("second-question")
        submit.tap()
        expect(overlay).to_have_count(0)
    finally:
        ui.shot("end")
        context.close()


def test_look__inactive_question_history_is_quiet(ui: Ui, flow: Flow) -> None:
    task = flow.task("Quiet history")
    session = flow.session(task, "[ask][wait:1] earlier question")
    cid = flow.asked(session)[0]
    flow.detached_and_idle(session)
    flow.send(session, "moving on")
    ui.goto(session_route(task, session))
    expect(ui.entry(cid)).to_have_attribute("data-state", "superseded")
    late = ui.entry(cid).get_by_role("button", name="Answer as new message")
    box = late.bounding_box()
    assert box is not None and box["height"] <= 36, box  # a link-sized control until opened
    ui.tap(late)
    expect(ui.entry(cid).locator("form.late-form")).to_be_visible()
