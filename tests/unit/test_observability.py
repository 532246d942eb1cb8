"""The observability module: ids bound per scope, the two line formats, EMF documents (Powertools Metrics:
a metric's values are a list), and the metrics the services emit (resume's ambiguous dispatch, the
reconciler's report) over the in-memory world."""
from __future__ import annotations

import contextvars
import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from chalicelib import observability as obs
from chalicelib.domain.errors import DispatchAmbiguous
from chalicelib.functions.reconciler import reconcile
from tests.support.world import ANSWER, World


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def metrics(self, name: str) -> list[dict[str, Any]]:
        return [r.metric for r in self.records if name in (getattr(r, "metric", None) or {})]  # type: ignore[attr-defined]


@pytest.fixture
def records() -> Iterator[Records]:
    handler = Records()
    logger = logging.getLogger(obs.METRICS_LOGGER)
    logger.addHandler(handler)
    with obs.scope():  # ids a service binds end with the test
        yield handler
    logger.removeHandler(handler)


def fresh(test: Any) -> Any:
    """Run the test in an empty context: services called outside any request scope leave ids bound."""
    def run() -> None:
        contextvars.Context().run(test)
    run.__name__ = test.__name__
    return run


@fresh
def test_scope__ids_bound_inside__gone_after_and_none_unbinds() -> None:
    with obs.scope(session="s1", turn="t1"):
        obs.bind(delivery="d1", turn=None)
        assert obs.current() == {"session": "s1", "delivery": "d1"}
    assert "session" not in obs.current() and "delivery" not in obs.current()


@fresh
def test_formats__json_line_and_readable_line__carry_ids_and_fields() -> None:
    log = logging.getLogger("test.formats")
    with obs.scope(request_id="r1", session="s1"):
        record = log.makeRecord(log.name, logging.INFO, __file__, 1, "respond %s", (200,), None,
                                extra={"fields": {"status": 200}})
    doc = json.loads(obs.JsonFormatter().format(record))
    assert (doc["message"], doc["request_id"], doc["function_request_id"], doc["session"], doc["status"]) == (
        "respond 200", "r1", "r1", "s1", 200)
    assert doc["level"] == "INFO" and doc["service"] == obs.service() and "location" in doc  # Powertools' shape
    assert "clarify_ids" not in doc and "fields" not in doc
    line = obs.TextFormatter().format(record)
    assert "INFO  test.formats: respond 200  request_id=r1 session=s1 status=200" in line


def test_configure__twice__one_handler_of_ours(monkeypatch: pytest.MonkeyPatch) -> None:
    root = logging.getLogger()
    before, level = list(root.handlers), root.level
    stream = io.StringIO()
    try:
        obs.configure("text", stream=stream)
        obs.configure("json", stream=stream)
        ours = [h for h in root.handlers if h not in before]
        assert len(ours) == 1 and isinstance(ours[0].formatter, obs.JsonFormatter)
        with pytest.raises(ValueError):
            obs.configure("xml")
    finally:
        for h in list(root.handlers):
            if h not in before:
                root.removeHandler(h)
        root.setLevel(level)


def test_emit__two_breakdowns__refused() -> None:
    with pytest.raises(ValueError):
        obs.count(obs.ANSWERS, delivery="live", reason="x")


def test_resume__agent_outcome_unknown__ambiguous_dispatch_metric(records: Records) -> None:
    w = World()
    sid, cid = w.detached()
    w.agent.outcomes = ["ambiguous"]

    with pytest.raises(DispatchAmbiguous):
        w.respond(cid, ANSWER)

    [doc] = records.metrics(obs.AMBIGUOUS_DISPATCHES)
    assert doc["path"] == "resume" and doc[obs.AMBIGUOUS_DISPATCHES] == [1]


def test_reconcile__attempted_prompt__ambiguous_and_repair_metrics(records: Records) -> None:
    w = World()
    session = w.session()
    w.agent.outcomes = ["ambiguous"]
    with pytest.raises(DispatchAmbiguous):
        w.send(session.id, "hello")
    assert [d["path"] for d in records.metrics(obs.AMBIGUOUS_DISPATCHES)] == ["prompt"]

    report = reconcile(w.deps, before_traffic=True)

    assert report.prompts_ambiguous == 1
    assert [d["path"] for d in records.metrics(obs.AMBIGUOUS_DISPATCHES)] == ["prompt", "reconciler"]
    assert [(d["kind"], d[obs.RECONCILER_REPAIRS]) for d in records.metrics(obs.RECONCILER_REPAIRS)] == [
        ("prompts_ambiguous", [1])]


def test_reconcile__an_unrepairable_session__quarantines_metric(records: Records) -> None:
    w = World()
    sid = w.session().id
    item = dict(w.memory.items[sid], state="NOT-A-STATE", recon_shard="due", recon_due=w.deps.now())
    w.memory.put_raw_session(item)

    report = reconcile(w.deps, before_traffic=True)

    assert report.quarantined == [sid]
    assert [d[obs.QUARANTINES] for d in records.metrics(obs.QUARANTINES)] == [[1]]
