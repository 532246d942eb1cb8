"""Structured logs and metrics over the running stack: the lines of one detached answer carry the correlation
ids and nothing secret; respond, resume and the reconciler emit their metrics in CloudWatch's format."""
from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from chalicelib import observability as obs
from scripts.local.sim_agent import SimAgent
from scripts.local.stack import LocalStack
from tests.support.flow import ONE_QUESTION, Flow, in_thread

SECRET = "my-private-answer-text-1234"
ANSWER = {"answers": [{"question_id": "q1", "selected_options": ["pg"], "custom_text": SECRET}]}
CORRELATION = {"request_id", "route", "workspace", "task", "session", "turn", "clarification", "delivery",
               "generation", "successor_turn"}


class Lines(logging.Handler):
    """Every log line of the process, formatted exactly as Lambda would write it."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.setFormatter(obs.JsonFormatter())
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))

    def docs(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.lines]

    def metrics(self, name: str) -> list[dict[str, Any]]:
        return [d for d in self.docs() if "_aws" in d and name in d]


@pytest.fixture
def logs() -> Iterator[Lines]:
    root, handler = logging.getLogger(), Lines()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    yield handler
    root.removeHandler(handler)
    root.setLevel(level)


@pytest.fixture
def flow(shared: tuple[LocalStack, SimAgent]) -> Flow:
    return Flow(shared[0], shared[1], f"ws-{uuid.uuid4().hex[:12]}", questions=ONE_QUESTION)


def test_detached_answer__log_lines__carry_correlation_ids_and_no_secrets(flow: Flow, logs: Lines) -> None:
    sid, cid = flow.detached()

    resp = flow.respond(cid, ANSWER, key="idem-1")

    assert resp.status_code == 200 and resp.json()["delivery"] == "resumed", resp.text
    mine = [d for d in logs.docs() if d.get("route") == "respond" and d.get("clarification") == cid]
    assert any(d["message"] == "respond 200" for d in mine) and any(obs.ANSWERS in d for d in mine), mine
    for doc in mine:
        assert CORRELATION <= set(doc), (CORRELATION - set(doc), doc)
        assert (doc["session"], doc["workspace"]) == (sid, flow.workspace)
        assert doc["successor_turn"] == flow.stored(sid).current_turn.id  # type: ignore[union-attr]
    everything = "\n".join(logs.lines)
    assert SECRET not in everything and "Postgres" not in everything  # no answer content, no option label
    assert "eyJ" not in everything and flow.user.token not in everything  # no token of any kind


def test_respond_live__answers_metric__emf_with_its_delivery(flow: Flow, logs: Lines) -> None:
    sid, cid = flow.waiting()
    responder = in_thread(lambda: flow.respond(cid, {"answers": [{"question_id": "q1", "selected_options": ["pg"]}]}))
    claim = flow.take_claim(cid)
    assert flow.confirm(cid, claim["delivery_id"]).status_code == 200
    assert responder.result(timeout=60).json()["delivery"] == "live"

    [doc] = [d for d in logs.metrics(obs.ANSWERS) if d.get("clarification") == cid]
    assert doc["delivery"] == "live" and doc[obs.ANSWERS] == [1] and doc["session"] == sid
    [directive] = doc["_aws"]["CloudWatchMetrics"]
    assert directive["Namespace"] == "Clarify" and directive["Dimensions"] == [["service"], ["service", "delivery"]]
    assert directive["Metrics"] == [{"Name": obs.ANSWERS, "Unit": "Count"}]
    assert isinstance(doc["_aws"]["Timestamp"], int) and doc["service"] == obs.service()


def test_respond__inactive__conflict_metric_by_reason(flow: Flow, logs: Lines) -> None:
    sid, cid = flow.detached()
    assert flow.skip(cid).status_code == 200

    assert flow.skip(cid).status_code == 409

    [doc] = [d for d in logs.metrics(obs.CONFLICTS) if d.get("clarification") == cid]
    assert doc["reason"] == "rejected" and doc["session"] == sid


def test_reconcile__unconfirmed_live_claim__repair_and_restore_metrics(flow: Flow, logs: Lines) -> None:
    sid, cid = flow.waiting()
    responder = in_thread(lambda: flow.respond(cid, {"answers": [{"question_id": "q1", "selected_options": ["pg"]}]}))
    flow.take_claim(cid)  # the waiter takes the claim and dies before confirming it

    report = flow.reconcile_later(120, sid)  # past the claim's owner deadline
    responder.result(timeout=60)

    assert report.intents_restored == 1
    repairs = [d for d in logs.metrics(obs.RECONCILER_REPAIRS) if d["kind"] == "intents_restored"]
    assert [d[obs.RECONCILER_REPAIRS] for d in repairs] == [[1]]
    assert repairs[0]["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["service"], ["service", "kind"]]
    [restore] = [d for d in logs.metrics(obs.RESTORES) if d.get("cause") == "reconciler"]
    assert restore[obs.RESTORES] == [1]
