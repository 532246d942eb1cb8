"""Fixtures of the browser tests (helpers: tests/support/browser.py). Their names do not collide with the root
conftest's, so the other end-to-end tests keep their own fresh stacks."""
from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from scripts.local.sim_agent import SimAgent
from scripts.local.stack import LocalStack
from tests.support.browser import CHROMIUM, CHROMIUM_ARGS, VIEWPORTS, Flow, PumpThread, Ui, new_context
from tests.support.flow import ApiClient

try:
    from playwright.sync_api import Browser, sync_playwright
except ImportError:  # reported by the browser fixture
    sync_playwright = None


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    missing = sync_playwright is None or not Path(CHROMIUM).exists()
    if missing:  # never skipped: .ci/run installs chromium, `make` installs playwright
        pytest.fail("playwright (pip) and Debian's chromium are needed for the browser tests")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture(scope="module")
def module_pump(shared: tuple[LocalStack, SimAgent]) -> Iterator[PumpThread]:
    thread = PumpThread(shared[0]).start()
    yield thread
    thread.stop()


@pytest.fixture
def pump(module_pump: PumpThread) -> Iterator[PumpThread]:
    yield module_pump
    module_pump.resume()  # a test that paused it never leaves it paused for the next one


@pytest.fixture
def web_stack(shared: tuple[LocalStack, SimAgent]) -> LocalStack:
    return shared[0]


@pytest.fixture
def workspace() -> str:
    return f"ws-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def flow(shared: tuple[LocalStack, SimAgent], workspace: str) -> Flow:
    stack, agent = shared
    return Flow(ApiClient(stack.url, stack.user_token(workspace=workspace)), agent)


@pytest.fixture(params=list(VIEWPORTS))
def ui(request: pytest.FixtureRequest, browser: Browser, web_stack: LocalStack, pump: PumpThread,
       workspace: str) -> Iterator[Ui]:
    viewport = request.param
    context = new_context(browser, viewport)
    name = re.sub(r"\W+", "_", request.node.originalname.removeprefix("test_"))
    app = Ui(context.new_page(), web_stack, viewport, f"{name}-{viewport}", workspace)
    app.goto()
    yield app
    app.shot("end")  # the last state, also when the test failed
    context.close()
    assert not app.errors, f"uncaught errors in the page: {app.errors}"
    # Every flow of every browser test runs under the client's real CSP (chalicelib/hosting.py): nothing blocked.
    assert not app.csp_violations, f"Content-Security-Policy violations: {app.csp_violations}"
