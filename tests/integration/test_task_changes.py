"""PATCH and DELETE /tasks/{id} over real HTTP against the emulator: the stored outcome and the feed."""
from __future__ import annotations

from scripts.local.sim_agent import SimAgent
from scripts.local.stack import LocalStack
from tests.conftest import ApiClient
from tests.support.routes import snapshot


def _events(user: ApiClient, kind: str) -> list[dict[str, object]]:
    return [e for e in user.get("/events").json()["events"] if e["type"] == kind]


def test_patch_task__title__200_task_and_task_updated_event(stack: LocalStack, user: ApiClient) -> None:
    task = user.post("/tasks", {"title": "Draft"}).json()
    resp = user.call("PATCH", f"/tasks/{task['id']}", {"title": "Final name"})
    assert resp.status_code == 200, resp.text
    assert resp.json()["title"] == "Final name" and resp.json()["id"] == task["id"]
    assert user.get(f"/tasks/{task['id']}").json()["title"] == "Final name"
    assert stack.pump is not None
    stack.pump.drain()  # the tasks table's stream function publishes it
    assert [e["payload"]["title"] for e in _events(user, "task.updated")] == ["Final name"]


def test_patch_task__bad_title__400_naming_title_nothing_written(stack: LocalStack, user: ApiClient) -> None:
    task = user.post("/tasks", {"title": "Keep"}).json()
    before = snapshot()
    for body in ({}, {"title": ""}, {"title": 5}, {"title": "x" * 201}):
        resp = user.call("PATCH", f"/tasks/{task['id']}", body)
        error = resp.json()["error"]
        assert (resp.status_code, error["code"], error["details"]["field"]) == (400, "validation_error", "title")
    assert snapshot() == before


def test_delete_task__live_sessions_cancelled_then_404_everywhere(stack: LocalStack, user: ApiClient,
                                                                  sim: SimAgent) -> None:
    task = user.post("/tasks", {"title": "Doomed"}).json()
    other = user.post("/tasks", {"title": "Survivor"}).json()
    session = user.post(f"/tasks/{task['id']}/sessions", {"prompt": "[hang] long work"}).json()
    assert user.get(f"/sessions/{session['id']}").json()["state"] == "RUNNING"

    resp = user.call("DELETE", f"/tasks/{task['id']}")
    assert resp.status_code == 204 and not resp.content
    assert [t["id"] for t in user.get("/tasks").json()["tasks"]] == [other["id"]]
    assert user.get(f"/tasks/{task['id']}").status_code == 404
    assert user.get(f"/tasks/{task['id']}/sessions").status_code == 404
    assert user.get(f"/sessions/{session['id']}").json()["state"] == "CANCELLED"
    assert stack.pump is not None
    stack.pump.drain()
    assert [e["task_id"] for e in _events(user, "task.deleted")] == [task["id"]]
    again = user.call("DELETE", f"/tasks/{task['id']}")
    assert again.status_code == 404 and again.json()["error"]["code"] == "not_found"


def test_list_tasks__last_activity_follows_the_sessions(stack: LocalStack, user: ApiClient, sim: SimAgent) -> None:
    quiet = user.post("/tasks", {"title": "Quiet"}).json()
    busy = user.post("/tasks", {"title": "Busy"}).json()
    user.post(f"/tasks/{busy['id']}/sessions", {"prompt": "hello"})
    listed = {t["id"]: t["last_activity_at"] for t in user.get("/tasks").json()["tasks"]}
    assert listed[quiet["id"]] == quiet["created_at"]
    assert listed[busy["id"]] > busy["created_at"] > quiet["created_at"]
