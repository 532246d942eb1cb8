"""The X-Ray trace of one answer: respond's subsegment with its correlation ids as annotations, and inside it
the store's DynamoDB calls, the bus's PutEvents and the agentctl call; then the stream function's subsegment
for the records the answer wrote, with its own PutEvents.

Powertools' Tracer traces only inside Lambda, so the test sets Lambda's environment, enables the tracer and
captures what the X-Ray SDK would send to the daemon with an emitter of its own. The request runs in this
thread through Chalice's local gateway (what the local server calls), so it belongs to the test's segment.
"""
from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from aws_lambda_powertools import Tracer
from aws_xray_sdk import global_sdk_config
from aws_xray_sdk.core import xray_recorder
from aws_xray_sdk.core.context import Context
from chalice.config import Config
from chalice.local import LocalGateway

from chalicelib import observability as obs
from scripts.local.api_server import _config
from scripts.local.sim_agent import SimAgent
from scripts.local.stack import LocalStack
from tests.support.flow import ONE_QUESTION, Flow

ANSWER = {"answers": [{"question_id": "q1", "selected_options": ["pg"]}]}


class Captured:
    """An X-Ray emitter (the SDK's interface: send_entity, set_daemon_address) keeping every document."""

    def __init__(self) -> None:
        self.documents: list[dict[str, Any]] = []

    def send_entity(self, entity: Any) -> None:
        self.documents.append(json.loads(entity.serialize()))

    def set_daemon_address(self, address: str | None) -> None:
        pass

    def subsegments(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []

        def walk(doc: dict[str, Any]) -> None:
            for sub in doc.get("subsegments", []):
                found.append(sub)
                walk(sub)
        for doc in self.documents:
            if doc.get("type") == "subsegment":
                found.append(doc)
            walk(doc)
        return found


@pytest.fixture
def flow(shared: tuple[LocalStack, SimAgent]) -> Flow:
    return Flow(shared[0], shared[1], f"ws-{uuid.uuid4().hex[:12]}", questions=ONE_QUESTION)


@pytest.fixture
def tracing(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Returns a function that turns tracing on (as in Lambda) and gives the capturing emitter."""
    saved = (xray_recorder.emitter, xray_recorder.context, xray_recorder.sampling, xray_recorder.streaming_threshold)

    def enable() -> Captured:
        monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "clarify-test")
        monkeypatch.setenv("LAMBDA_TASK_ROOT", "/var/task")
        Tracer._reset_config()
        global_sdk_config.set_sdk_enabled(True)
        tracer = Tracer(service="clarify-test", patch_modules=obs.TRACED_MODULES)
        assert not tracer.disabled
        captured = Captured()
        xray_recorder.configure(emitter=captured, context=Context(context_missing="IGNORE_ERROR"), sampling=False)
        monkeypatch.setattr(obs, "tracer", tracer)
        return captured
    yield enable
    global_sdk_config.set_sdk_enabled(False)  # the patched clients trace nothing any more
    Tracer._reset_config()
    xray_recorder.emitter, xray_recorder.context, xray_recorder.sampling, xray_recorder.streaming_threshold = saved


def test_respond__trace__store_and_agentctl_subsegments_annotated_with_ids(flow: Flow, tracing: Any) -> None:
    import app

    sid, cid = flow.detached()  # the agent is gone: the answer resumes it through agentctl
    gateway = LocalGateway(app.app, Config(chalice_stage="local", config_from_disk=_config(),
                                           user_provided_params={}))
    captured = tracing()

    xray_recorder.begin_segment("clarify-test")
    try:
        resp = gateway.handle_request(method="POST", path=f"/api/v1/clarifications/{cid}/respond",
                                      headers={"authorization": f"Bearer {flow.user.token}",
                                               "content-type": "application/json"},
                                      body=json.dumps(ANSWER).encode())
    finally:
        xray_recorder.end_segment()

    assert resp["statusCode"] == 200 and json.loads(resp["body"])["delivery"] == "resumed", resp
    subs = captured.subsegments()
    (respond,) = [s for s in subs if s["name"] == "## respond"]
    annotations = respond["annotations"]
    assert annotations["session"] == sid and annotations["clarification"] == cid
    assert annotations["workspace"] == flow.workspace and annotations["route"] == "respond"
    assert annotations["request_id"]
    inner = {s["id"] for s in _descendants(respond, subs)}
    calls = [s for s in subs if s["id"] in inner]
    store = {s["aws"]["operation"] for s in calls if s.get("namespace") == "aws" and s["name"] == "dynamodb"}
    assert {"GetItem", "UpdateItem"} <= store, store
    bus = [s["aws"]["operation"] for s in calls if s.get("namespace") == "aws" and s["name"] == "events"]
    assert bus == ["PutEvents"], bus
    # The SDK records host and path (not the port): the agent runtime's /prompt, resuming the agent.
    agentctl = [s["http"]["request"] for s in calls if s.get("namespace") == "remote"]
    assert {"method": "POST", "url": "http://127.0.0.1/prompt"} in agentctl, agentctl

    # The answer's records reach the bus through the stream function: its own subsegment, the PutEvents in it.
    xray_recorder.begin_segment("clarify-test-stream")
    try:
        flow.drain()
    finally:
        xray_recorder.end_segment()
    subs = captured.subsegments()
    streams = [s for s in subs if s["name"] == "## sessions_stream" and s["annotations"].get("function")]
    publishing = [s for s in streams
                  if any(d.get("name") == "events" and d["aws"]["operation"] == "PutEvents"
                         for d in _descendants(s, subs))]
    assert publishing, sorted({s["name"] for s in subs})


def _descendants(parent: dict[str, Any], everything: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Nested subsegments, and streamed ones that name `parent` (or one of its descendants) as parent_id."""
    out: list[dict[str, Any]] = []
    frontier = [parent]
    while frontier:
        node = frontier.pop()
        children = list(node.get("subsegments", []))
        children += [s for s in everything if s.get("parent_id") == node["id"] and s not in children]
        out.extend(children)
        frontier.extend(children)
    return out
