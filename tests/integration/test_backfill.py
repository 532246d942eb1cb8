"""The task list's backfill on the emulator (issue 26): a task stored before `list_key` existed is missing from
`GET /tasks` (the sparse `by_activity` index) until the before-traffic reconciler gives it its place. Its own
stack: the reconciler runs over every table of it."""
from __future__ import annotations

import uuid

from chalicelib import bootstrap
from chalicelib.services import backfill
from chalicelib.store.expr import to_attr
from chalicelib.store.models import TaskRecord
from scripts.local.sim_agent import SimAgent
from scripts.local.stack import LocalStack
from tests.support.flow import ONE_QUESTION, Flow


def test_task_list__a_task_stored_before_the_list_index__listed_after_the_reconciler(stack: LocalStack,
                                                                                      sim: SimAgent) -> None:
    """Issue 26 leftover: a task stored without `list_key` is not in the sparse index `GET /tasks` pages through;
    the before-traffic reconciler's backfill gives it its place, and a second run changes nothing."""
    flow = Flow(stack, sim, f"ws-{uuid.uuid4().hex[:12]}", questions=ONE_QUESTION)
    new = flow.task("New")
    old_id = f"task-{uuid.uuid4().hex[:12]}"
    item = {"task_id": old_id, "workspace_id": flow.workspace, "created_at": "2024-01-01T00:00:00.000000Z",
            "title": "Old", "workflow_step": "todo", "summary_revision": 0}  # the shape before issue 26
    store = bootstrap.deps().store
    store.client.put_item(TableName=str(TaskRecord.Meta.table_name), Item={k: to_attr(v) for k, v in item.items()})
    assert [t["id"] for t in flow.user.get("/tasks").json()["tasks"]] == [new]
    store.set_meta(backfill.LIST_KEY, "", "2030-01-01T00:00:00.000000Z")  # the stack's start finished it already
    assert stack.reconcile()["tasks_listed"] == 1
    assert [t["id"] for t in flow.user.get("/tasks").json()["tasks"]] == [new, old_id]
    assert flow.user.get(f"/tasks/{old_id}").status_code == 200
    store.set_meta(backfill.LIST_KEY, "", "2030-01-01T00:00:00.000000Z")
    assert stack.reconcile()["tasks_listed"] == 0  # idempotent
