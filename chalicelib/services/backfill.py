"""Backfills of items stored before an attribute existed, run by the reconciler a bounded step at a time.

The task list pages through the sparse `by_activity` index, keyed on `list_key`; a task stored before that
attribute existed is not in the index and so not in `GET /tasks`. Each reconciler run scans a bounded number
of tasks from where the last run stopped (the position is kept in the deployment metadata) and gives every
task it finds without the key its place; once the table is done, a run costs one metadata read.
"""
from __future__ import annotations

from .deps import Deps

LIST_KEY = "backfill#list_key"  # metadata: the task id the next step starts after, or DONE
DONE = "done"
STEP = 100  # tasks scanned per step
STEPS = 10  # steps per run: a run scans at most STEPS * STEP tasks


def list_old_tasks(deps: Deps, *, steps: int = STEPS, step: int = STEP) -> int:
    """Continue the task list's backfill for at most `steps` Scan steps; the number of tasks it listed."""
    at = deps.store.get_meta(LIST_KEY)
    if at == DONE:
        return 0
    listed = 0
    after = at or None
    for _ in range(steps):
        found, after = deps.store.unlisted_tasks(step, after)
        listed += sum(deps.store.list_old_task(task) for task in found)
        if after is None:
            break
    deps.store.set_meta(LIST_KEY, after or DONE, deps.now())
    return listed
