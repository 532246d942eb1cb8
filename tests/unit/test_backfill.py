"""The task list's backfill: bounded per run, resumable from where the last run stopped, idempotent."""
from __future__ import annotations

from dataclasses import replace

import pytest

from chalicelib.domain.errors import StoreUnavailable
from chalicelib.domain.model import Task
from chalicelib.functions.reconciler import ReconcileFailed, reconcile
from chalicelib.services import backfill, readiness, tasks
from chalicelib.store import codec
from chalicelib.store.memory import MemoryStore
from tests.contract.builders import task
from tests.support.world import USER, World


def _old(w: World, n: int) -> str:
    """A task as stored before `list_key` existed."""
    t = replace(task(f"old-{n}"), workspace_id=USER.workspace_id, created_at=f"2024-01-01T00:00:0{n}.000000Z")
    w.store.task_items[t.id] = {k: v for k, v in codec.task_to_item(t).items() if k != "list_key"}
    return t.id


def _listed(w: World) -> list[str]:
    return [x.task.id for x in tasks.list_tasks(w.deps, USER, limit=50, cursor=None).tasks]


def test_backfill__bounded_steps__resumes_where_the_last_run_stopped() -> None:
    w = World(MemoryStore())
    old = [_old(w, n) for n in range(5)]
    assert _listed(w) == []
    assert backfill.list_old_tasks(w.deps, steps=1, step=2) == 2  # one run: at most one step of two
    assert w.store.get_meta(backfill.LIST_KEY) == old[1]
    assert _listed(w) == [old[1], old[0]]
    assert backfill.list_old_tasks(w.deps, steps=2, step=2) == 3
    assert w.store.get_meta(backfill.LIST_KEY) == backfill.DONE
    assert _listed(w) == list(reversed(old))
    assert backfill.list_old_tasks(w.deps) == 0  # done: nothing scanned again


def test_backfill__run_by_every_reconcile__counted_in_its_report() -> None:
    w = World(MemoryStore())
    old = _old(w, 1)
    assert reconcile(w.deps, before_traffic=True).tasks_listed == 1
    assert _listed(w) == [old]
    assert reconcile(w.deps, before_traffic=False).tasks_listed == 0


def test_backfill__database_unavailable__run_fails_and_the_next_one_goes_on() -> None:
    class Flaky(MemoryStore):
        fail = True

        def unlisted_tasks(self, limit: int, after: str | None) -> tuple[list[Task], str | None]:
            if self.fail:
                raise StoreUnavailable("the database did not answer")
            return super().unlisted_tasks(limit, after)

    w = World(Flaky())
    old = _old(w, 1)
    with pytest.raises(ReconcileFailed, match="backfill"):
        reconcile(w.deps, before_traffic=True)
    assert not readiness.is_ready(w.deps)
    w.store.fail = False  # type: ignore[attr-defined]
    assert reconcile(w.deps, before_traffic=True).tasks_listed == 1 and _listed(w) == [old]
