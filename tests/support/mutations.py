"""Mutants for the explorer's own test: one condition clause of one aggregate write removed, or one fence
taken down. An explorer that reports no violation for a mutant could not have seen the defect it allows."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from unittest import mock

from chalicelib.store import conditions
from chalicelib.store.writes import ConditionalWrites
from scripts.local.fence import CancelFence


@dataclass(frozen=True)
class Mutant:
    name: str
    writes: tuple[str, ...]  # the store writes it changes: the cases that pass through them are searched first
    apply: Callable[[], Any]  # a context manager that holds the mutation


@contextmanager
def without_clause(write: str, clause: str) -> Iterator[None]:
    """`clause` (a function of chalicelib.store.conditions) always holds inside `write`, and only there."""
    real_clause = getattr(conditions, clause)
    real_write = getattr(ConditionalWrites, write)
    inside = [0]

    def clause_or_nothing(*args: Any, **kwargs: Any) -> Any:
        return conditions.session_exists() if inside[0] else real_clause(*args, **kwargs)

    def write_without(self: Any, *args: Any, **kwargs: Any) -> Any:
        inside[0] += 1
        try:
            return real_write(self, *args, **kwargs)
        finally:
            inside[0] -= 1
    with mock.patch.object(conditions, clause, clause_or_nothing), \
            mock.patch.object(ConditionalWrites, write, write_without):
        yield


@contextmanager
def without_agentctl_fence() -> Iterator[None]:
    """agentctl takes every prompt, even one whose generation a cancel already covered."""
    with mock.patch.object(CancelFence, "admits", lambda self, session_id, generation: True):
        yield


def clause_mutant(write: str, clause: str) -> Mutant:
    return Mutant(f"{write}: {clause}", (write,), lambda: without_clause(write, clause))


# The claim conditions: every clause of the writes that claim, confirm, hand back, fall through, reserve,
# attempt and finish an answer's delivery. Then the fences that keep prompts from an ended session.
CLAIM_CONDITIONS: dict[str, tuple[str, ...]] = {
    "claim": ("bundle_claimable", "bundle_current", "not_terminal", "row_pending", "no_reservation", "turn_as"),
    "confirm_delivery": ("delivery_unconfirmed", "delivery_live"),
    "retire_claim": ("delivery_unconfirmed", "moved_on", "reservation_is", "reservation_unattempted",
                     "row_has_status"),
    "restore_claim": ("delivery_unconfirmed", "not_terminal", "bundle_current", "reservation_is", "turn_is",
                      "row_has_status"),
    "fall_through": ("delivery_unconfirmed", "bundle_current", "not_terminal", "no_reservation", "turn_as",
                     "row_has_status"),
    "mark_attempted": ("reservation_is", "reservation_unattempted", "turn_is", "not_terminal"),
    "finish_reservation": ("reservation_is", "delivery_is"),
    "to_start_event": ("reservation_is", "delivery_is"),
}
FENCES: list[Mutant] = [
    Mutant("agentctl's cancel fence", ("set_dispatch", "mark_attempted", "admit", "start_from_queue"),
           without_agentctl_fence),
    clause_mutant("set_dispatch", "not_terminal"),  # Clarify's own check before a prompt's dispatch
    clause_mutant("start_from_queue", "not_terminal"),
    clause_mutant("admit_watchdog_prompt", "not_terminal"),
]
MUTANTS: list[Mutant] = [clause_mutant(w, c) for w, clauses in CLAIM_CONDITIONS.items() for c in clauses] + FENCES
