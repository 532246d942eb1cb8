"""clarify-ops against the emulator: each verb, its readable and JSON output, and its exit codes."""
from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chalicelib import bootstrap
from chalicelib.domain.model import Delivery
from chalicelib.store.expr import to_attr
from chalicelib.store.models import SessionRecord
from scripts import clarify_ops as ops
from scripts.local.sim_agent import SimAgent
from scripts.local.stack import LocalStack
from scripts.local.stream_failures import FailureStore
from tests.support.flow import ONE_QUESTION, Flow

PAST = "2020-01-01T00:00:00.000000Z"


@pytest.fixture
def flow(shared: tuple[LocalStack, SimAgent]) -> Flow:
    return Flow(shared[0], shared[1], f"ws-{uuid.uuid4().hex[:12]}", questions=ONE_QUESTION)


def run(*argv: str) -> tuple[int, list[str]]:
    lines: list[str] = []
    code = ops.main(list(argv), out=lines.append)
    return code, lines


def run_json(*argv: str) -> tuple[int, Any]:
    code, lines = run("--json", *argv)
    return code, json.loads("\n".join(lines))


def quarantine(session_id: str, reason: str = "reservation names no claimed bundle") -> None:
    """The reconciler's quarantine mark, written by hand: the map on the item and the index's partition."""
    store = bootstrap.deps().store
    store.client.update_item(
        TableName=SessionRecord.Meta.table_name, Key={"session_id": {"S": session_id}},
        UpdateExpression="SET quarantine = :q, recon_shard = :s, recon_due = :d",
        ExpressionAttributeValues={":q": to_attr({"reason": reason, "at": PAST}), ":s": {"S": "quarantined"},
                                   ":d": {"S": PAST}})


def unconfirmed_claim(session_id: str, cid: str, deadline: str) -> None:
    """A live claim whose responder died before anyone confirmed it: an outstanding delivery intent."""
    d = bootstrap.deps()
    d.store.claim(session_id, cid, {"q1": {"question_id": "q1", "selected_options": ["pg"], "custom_text": ""}},
                  status="answered", delivery=Delivery("ops-d1", ("q1",), "answered", "live", PAST, deadline),
                  reservation=None, at=d.now())


# ------------------------------------------------------------------ session
def test_session__waiting_question__rows_rule_and_lease_decoded(flow: Flow) -> None:
    sid, cid = flow.waiting()

    code, view = run_json("session", sid)

    assert code == ops.OK
    assert view["session"] == sid and view["state"] == "WAITING_FOR_INPUT"
    assert view["rule"] == {"pending_action": "clarification", "input_capable": True, "terminal": False,
                            "active_clarifications": [cid]}
    [bundle] = view["bundles"]
    assert bundle["clarification"] == cid and bundle["active"] and bundle["state"] == "active_live"
    assert bundle["rows"] == [{"question": "q1", "status": "pending", "detached": False, "has_response": False}]
    assert view["quarantine"] is None and view["reservation"] is None


def test_session__readable__names_the_delivery_and_no_answer_text(flow: Flow) -> None:
    sid, cid = flow.waiting()
    unconfirmed_claim(sid, cid, PAST)

    code, lines = run("session", sid)

    text = "\n".join(lines)
    assert code == ops.OK and cid in text and "delivery ops-d1" in text and "OVERDUE" in text
    assert "pg" not in text.split("delivery")[1]  # the chosen option (answer content) is never shown


def test_session__unknown__not_found(flow: Flow) -> None:
    code, body = run_json("session", "no-such-session")
    assert code == ops.NOT_FOUND and body["error"] == "not_found"


# ------------------------------------------------------------------ outstanding, reconcile
def test_outstanding__overdue_intent_and_quarantined_session__listed_and_attention(flow: Flow) -> None:
    sid, cid = flow.waiting()
    unconfirmed_claim(sid, cid, PAST)
    broken = flow.session()
    quarantine(broken)

    code, report = run_json("outstanding")

    assert code == ops.ATTENTION
    mine = {d["session"]: d for d in report["due"]}
    assert mine[sid]["overdue"] and f"delivery intent {cid}" in mine[sid]["work"]
    assert {"session": broken, "reason": "reservation names no claimed bundle", "at": PAST} in report["quarantined"]


def test_reconcile__overdue_intent__restored_then_nothing_outstanding(flow: Flow) -> None:
    sid, cid = flow.waiting()
    unconfirmed_claim(sid, cid, PAST)

    code, report = run_json("reconcile")

    assert code == ops.OK and report["intents_restored"] >= 1
    assert run_json("session", sid)[1]["bundles"][0]["delivery"] is None
    code, report = run_json("outstanding")
    mine = [d for d in report["due"] if d["session"] == sid]
    assert all(f"delivery intent {cid}" not in d["work"] for d in mine)  # only the ask's lease may remain


def test_reconcile__before_traffic__sets_the_flag(flow: Flow) -> None:
    code, lines = run("reconcile", "--before-traffic")
    assert code == ops.OK and lines[0].startswith("reconciled:")


# ------------------------------------------------------------------ release
def test_release__quarantined__mark_gone_and_back_in_the_index(flow: Flow) -> None:
    sid = flow.session()
    quarantine(sid)

    code, body = run_json("release", sid)

    assert code == ops.OK and body == {"session": sid, "released": True}
    view = run_json("session", sid)[1]
    assert view["quarantine"] is None and view["owner_deadline"]["shard"] == "due"
    assert sid not in [q["session"] for q in run_json("outstanding")[1]["quarantined"]]
    assert run("release", sid)[0] == ops.NOTHING_TO_DO  # again: nothing to release
    assert run("release", "no-such-session")[0] == ops.NOT_FOUND


# ------------------------------------------------------------------ replay
@pytest.fixture
def failures(shared: tuple[LocalStack, SimAgent], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
             ) -> Iterator[FailureStore]:
    monkeypatch.setenv("CLARIFY_STREAM_FAILURE_DIR", str(tmp_path))
    yield FailureStore(tmp_path)


def test_replay__set_aside_record__listed_then_replayed(flow: Flow, failures: FailureStore) -> None:
    task = flow.task()
    record = {"eventID": "1", "eventName": "INSERT", "eventSource": "aws:dynamodb", "awsRegion": "us-east-1",
              "eventSourceARN": "arn:aws:dynamodb:us-east-1:000000000000:table/t/stream/s", "dynamodb": {
        "Keys": {"task_id": {"S": task}}, "SequenceNumber": "4242", "StreamViewType": "NEW_AND_OLD_IMAGES",
        "ApproximateCreationDateTime": 1700000000, "SizeBytes": 100,
        "NewImage": {"task_id": {"S": task}, "workspace_id": {"S": flow.workspace}, "title": {"S": "Refactor"},
                     "workflow_step": {"S": "todo"}, "created_at": {"S": PAST}}}}
    from chalicelib.store.models import TaskRecord
    entry = failures.put(str(TaskRecord.Meta.table_name), "shard-1", record, attempts=5)

    code, listed = run_json("replay")
    assert code == ops.OK and [e["id"] for e in listed] == [entry.id]

    code, body = run_json("replay", entry.id)
    assert code == ops.OK and body == {"replayed": [entry.id], "still_failing": []}
    assert failures.list() == []
    assert run("replay", entry.id)[0] == ops.NOT_FOUND


# ------------------------------------------------------------------ the command itself
def test_command__usage_error__exit_2() -> None:
    done = subprocess.run([sys.executable, str(ops.ROOT / "scripts" / "clarify-ops"), "frobnicate"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == ops.USAGE and "invalid choice" in done.stderr
