"""Signing in at the user pool (the emulator's Cognito), from a person's point of view: sign in, answer, reload,
a token that expires mid-draft, sign out, and another workspace's user on the same browser."""
from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from scripts.local.sim_agent import SimAgent
from scripts.local.stack import LocalStack
from tests.support import pool
from tests.support.browser import Flow, PumpThread, eventually, new_context, session_route, until_js

try:
    from playwright.sync_api import Browser, Page, expect
except ImportError:  # reported by the browser fixture
    pass

pytestmark = pytest.mark.timeout(300)
ACCESS = "() => JSON.parse(localStorage.getItem('clarify.auth') || '{}').access"
SET_ACCESS = ("t => { const a = JSON.parse(localStorage.getItem('clarify.auth')); a.access = t; "
              "localStorage.setItem('clarify.auth', JSON.stringify(a)); }")


@pytest.fixture
def page(browser: Browser, shared: tuple[LocalStack, SimAgent]) -> Iterator[Page]:
    context = new_context(browser, "desktop")
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    yield page
    context.close()
    assert errors == []


def sign_in(page: Page, email: str, password: str) -> None:
    page.locator("#email-input").fill(email)
    page.locator("#password-input").fill(password)
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator(".task-panel")).to_be_visible()


def test_sign_in__answer_reload_refresh_mid_draft_sign_out_other_workspace(
        page: Page, web_stack: LocalStack, flow: Flow, workspace: str, pump: PumpThread) -> None:
    email, password = web_stack.pool_user(workspace)
    page.goto(f"{web_stack.url}/")
    page.locator("#email-input").fill(email)
    page.locator("#password-input").fill("Not-the-password-1")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_contain_text("Sign-in failed")
    sign_in(page, email, password)

    # Answer a question.
    task = flow.task("Signed-in work")
    session = flow.session(task, "[ask] which one?")
    cid = flow.asked(session)[0]
    page.evaluate("route => { location.hash = route; }", session_route(task, session))
    page.locator("#overlay").get_by_label("Option A").check()
    page.locator("#overlay").get_by_role("button", name="Submit answers").click()
    expect(page.locator(f'li.clar[data-clarification-id="{cid}"]')).to_contain_text("Answer: Option A")

    # A reload: still signed in, no sign-in form.
    page.reload()
    expect(page.locator("#topbar")).to_be_visible()
    expect(page.locator("#email-input")).to_have_count(0)
    flow.idle(session)

    # Mid-draft, the access token expires (by its exp): refreshed before the next request, the draft intact.
    composer = page.locator("#composer-input")
    composer.press_sequentially("a thought typed while the token expires")
    now = int(time.time())
    expired = pool.sign(pool.access_claims(workspace, iat=now - 7200, exp=now - 1))
    page.evaluate(SET_ACCESS, expired)
    flow.task("After expiry")  # ends the feed's long poll in flight; the next one is asked with a refreshed token
    page.wait_for_function(f"t => ({ACCESS})() !== t", arg=expired)
    renewed = page.evaluate(ACCESS)
    assert pool.claims(renewed)["exp"] > now
    flow.task("Fed after the refresh")
    expect(page.locator(".task-panel")).to_contain_text("Fed after the refresh")
    # Then a token the API refuses although its exp says it is good (revoked keys, a clock ahead): the request is
    # refused, the token refreshed and the same request sent again; the feed goes on and nothing typed is lost.
    refused = pool.with_kid(renewed, "revoked-key")
    page.evaluate(SET_ACCESS, refused)
    flow.task("After refusal")
    page.wait_for_function(f"t => ({ACCESS})() !== t", arg=refused)
    flow.task("Fed after the second refresh")
    expect(page.locator(".task-panel")).to_contain_text("Fed after the second refresh")
    expect(composer).to_have_value("a thought typed while the token expires")
    assert page.evaluate("() => window.clarify.state.online") is True
    composer.press("Enter")
    typed = "a thought typed while the token expires"
    eventually(lambda: any(m.get("content") == typed for m in flow.messages(session)), "the message typed across")

    # Sign out: nothing this browser kept for the user stays, drafts included.
    composer.press_sequentially("an unsent draft")
    until_js(page, "() => Object.keys(localStorage).some(k => k.startsWith('clarify.draft.'))", "a stored draft")
    page.get_by_role("button", name="Sign out").click()
    expect(page.locator("#email-input")).to_be_visible()
    kept = page.evaluate("() => Object.fromEntries(Object.entries(localStorage))")
    assert set(kept) <= {"clarify.auth"}, kept
    assert set(eval_json(kept.get("clarify.auth", "{}"))) <= {"pool"}, kept

    # Another workspace's user on the same browser sees nothing of the first.
    other_email, other_password = web_stack.pool_user(f"{workspace}-other")
    sign_in(page, other_email, other_password)
    until_js(page, "() => window.clarify.state.tasksLoaded", "the task list")
    assert page.evaluate("() => window.clarify.state.tasks.size") == 0
    expect(page.get_by_text("Signed-in work")).to_have_count(0)
    page.evaluate("route => { location.hash = route; }", session_route(task, session))
    expect(page.get_by_text("which one?")).to_have_count(0)
    expect(page.get_by_text("an unsent draft")).to_have_count(0)


def test_sign_in__user_in_no_workspace__told_so_plainly(page: Page, web_stack: LocalStack) -> None:
    import os

    from chalicelib import aws
    from scripts.local.identity import new_password
    cognito = aws.client("cognito-idp", endpoint_url=web_stack.endpoint)
    email, password = f"nobody-{int(time.time() * 1000)}@example.com", new_password()
    cognito.admin_create_user(UserPoolId=os.environ["CLARIFY_USER_POOL_ID"], Username=email, MessageAction="SUPPRESS")
    cognito.admin_set_user_password(UserPoolId=os.environ["CLARIFY_USER_POOL_ID"], Username=email, Password=password,
                                    Permanent=True)
    page.goto(f"{web_stack.url}/")
    page.locator("#email-input").fill(email)
    page.locator("#password-input").fill(password)
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator("#no-workspace")).to_contain_text("not in a workspace yet")
    expect(page.locator("#topbar")).to_have_count(0)
    page.get_by_role("button", name="Sign out").click()
    expect(page.locator("#email-input")).to_be_visible()


def eval_json(text: str) -> dict[str, object]:
    import json
    return dict(json.loads(text))


def test_sign_in__authenticator_app_enabled__asks_for_its_code(page: Page, web_stack: LocalStack, workspace: str,
                                                              flow: Flow) -> None:
    """MFA is optional (TOTP): a user who added an authenticator app is asked for its code after the password."""
    import os

    from moto.cognitoidp.models import COGNITO_TOTP_MFA_SECRET
    from moto.cognitoidp.utils import cognito_totp

    from chalicelib import aws
    from scripts.local.identity import sign_in as api_sign_in
    cognito = aws.client("cognito-idp", endpoint_url=web_stack.endpoint)
    email, password = web_stack.pool_user(workspace)
    access = api_sign_in(cognito, os.environ["CLARIFY_USER_POOL_CLIENT_ID"], email, password)["AccessToken"]
    secret = cognito.associate_software_token(AccessToken=access)["SecretCode"]
    assert secret == COGNITO_TOTP_MFA_SECRET  # the emulator's one secret: the test can compute its codes

    def code() -> str:
        return str(cognito_totp(secret).generate(int(time.time())).decode())
    cognito.verify_software_token(AccessToken=access, UserCode=code())
    cognito.set_user_mfa_preference(AccessToken=access,
                                    SoftwareTokenMfaSettings={"Enabled": True, "PreferredMfa": True})
    flow.task("Behind a second factor")
    page.goto(f"{web_stack.url}/")
    page.locator("#email-input").fill(email)
    page.locator("#password-input").fill(password)
    page.get_by_role("button", name="Sign in").click()
    page.get_by_label("Code from your authenticator app").fill(code())
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator(".task-panel")).to_contain_text("Behind a second factor")


def test_sign_in__user_added_by_an_operator__chooses_a_password_at_first_sign_in(
        page: Page, web_stack: LocalStack, workspace: str, flow: Flow) -> None:
    import os

    from chalicelib import aws
    from scripts import clarify_ops as ops
    from scripts.local.identity import new_password
    email = f"new-{int(time.time() * 1000)}@example.com"
    assert ops.main(["user", "add", email, "--workspace", workspace], out=lambda line: None) == ops.OK
    temporary, chosen = new_password(), new_password()  # the emulator sends no email: set the temporary one
    aws.client("cognito-idp", endpoint_url=web_stack.endpoint).admin_set_user_password(
        UserPoolId=os.environ["CLARIFY_USER_POOL_ID"], Username=email, Password=temporary, Permanent=False)
    flow.task("Waiting for the new user")
    page.goto(f"{web_stack.url}/")
    page.locator("#email-input").fill(email)
    page.locator("#password-input").fill(temporary)
    page.get_by_role("button", name="Sign in").click()
    page.get_by_label("Choose a new password").fill(chosen)
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator(".task-panel")).to_contain_text("Waiting for the new user")
