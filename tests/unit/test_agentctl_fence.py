"""agentctl's cancel fence (../shared/API.md): a cancel refuses every later prompt or steer that carries the
cancelled generation or an older one. The simulated agent (over HTTP) and the tests' fake hold it alike."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests

from chalicelib.agentctl.client import CancelRequest, PromptOutcome, PromptRequest
from scripts.local.sim_agent import SimAgent
from tests.support.fakes import FakeAgentctl

# (what happens, in order) -> whether the last prompt is taken. Each step: ("cancel", g) | ("prompt", g).
CASES: list[tuple[str, list[tuple[str, int]], bool]] = [
    ("no cancel", [("prompt", 3)], True),
    ("the cancelled generation", [("cancel", 3), ("prompt", 3)], False),
    ("an older generation", [("cancel", 3), ("prompt", 2)], False),
    ("a newer generation", [("cancel", 3), ("prompt", 4)], True),
    ("an older cancel never lowers the fence", [("cancel", 5), ("cancel", 2), ("prompt", 4)], False),
    ("generation 0 after a cancel of 0", [("cancel", 0), ("prompt", 0)], False),
]


@pytest.fixture(scope="module")
def sim() -> Iterator[SimAgent]:
    agent = SimAgent("http://127.0.0.1:9", port=0).start()
    yield agent
    agent.stop()


def _body(session: str, generation: Any, text: str = "[hang] hi") -> dict[str, Any]:
    return {"session_id": session, "execution_id": "e1", "prompt_generation": generation, "turn_id": "t1",
            "text": text}


@pytest.mark.parametrize(("name", "steps", "taken"), CASES, ids=[c[0] for c in CASES])
def test_fence__simulated_agent_over_http(sim: SimAgent, name: str, steps: list[tuple[str, int]],
                                          taken: bool) -> None:
    session = f"s-{abs(hash(name))}"
    status = 0
    for kind, generation in steps:
        if kind == "cancel":
            resp = requests.post(f"{sim.url}/cancel", json={"session_id": session, "execution_id": "e1",
                                                            "prompt_generation": generation, "silent": True},
                                 timeout=10)
            assert resp.status_code == 200
        else:
            status = requests.post(f"{sim.url}/prompt", json=_body(session, generation), timeout=10).status_code
    assert status == (202 if taken else 409)


@pytest.mark.parametrize(("name", "steps", "taken"), CASES, ids=[c[0] for c in CASES])
def test_fence__fake_agentctl(name: str, steps: list[tuple[str, int]], taken: bool) -> None:
    fake = FakeAgentctl(steering=True)
    outcome, steered = None, None
    for kind, generation in steps:
        if kind == "cancel":
            fake.cancel(CancelRequest(session_id="s", execution_id="e1", prompt_generation=generation, silent=True))
        else:
            request = PromptRequest(session_id="s", execution_id="e1", prompt_generation=generation, turn_id="t1",
                                    text="hi", agent_token="tok")
            outcome, steered = fake.prompt(request), fake.steer(request)
    assert outcome == (PromptOutcome.ACCEPTED if taken else PromptOutcome.REJECTED)
    assert steered is taken  # a steered message is a prompt too


def test_fence__simulated_agent__steer_of_a_cancelled_generation_refused(sim: SimAgent) -> None:
    session = "s-steer"

    def cancel(generation: int) -> None:
        requests.post(f"{sim.url}/cancel", json={"session_id": session, "execution_id": "e1",
                                                 "prompt_generation": generation, "silent": True}, timeout=10)
    assert requests.post(f"{sim.url}/prompt", json=_body(session, 1, "[slow:30] one"), timeout=10).status_code == 202
    cancel(1)
    assert requests.post(f"{sim.url}/prompt", json=_body(session, 2, "[slow:30] two"), timeout=10).status_code == 202
    try:
        assert requests.post(f"{sim.url}/steer", json=_body(session, 1, "late"), timeout=10).status_code == 409
        assert requests.post(f"{sim.url}/steer", json=_body(session, 2, "more"), timeout=10).status_code == 202
    finally:
        cancel(2)


@pytest.mark.parametrize("generation", [None, "3", 2.5, True])
def test_fence__simulated_agent__prompt_or_cancel_without_a_generation__400(sim: SimAgent, generation: Any) -> None:
    assert requests.post(f"{sim.url}/prompt", json=_body("s-bad", generation), timeout=10).status_code == 400
    assert requests.post(f"{sim.url}/cancel", json={"session_id": "s-bad", "prompt_generation": generation},
                         timeout=10).status_code == 400
