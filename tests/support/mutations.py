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

# Removals the explorer does not see yet, each with why. They are not hunted (each costs thousands of cases)
# and not counted as caught: the open part of the explorer's reach.
UNOBSERVABLE: dict[str, str] = {
    "claim: not_terminal": "implied: ending a session expires its current turn's pending rows in the same write, "
                           "so the claim's rows-pending clause already fails",
    "claim: no_reservation": "a second question's claim takes over the first's reservation; the first resume is "
                             "then refused and ends retired (sendable late): nothing lost or doubled, only the "
                             "first user told 'ambiguous', which no invariant checks yet",
    "retire_claim: moved_on": "implied by monotonicity: a turn never moves back and an ended session never lives "
                              "again, and every caller decided on a read that saw it moved on",
    "retire_claim: reservation_is": "one reservation at a time, and a claimed bundle's rows cannot be claimed again",
    "retire_claim: reservation_unattempted": "implied: mark_attempted needs the question's turn current and the "
                                             "session live, which a moved-on question never has again",
    "retire_claim: row_has_status": "implied: an unconfirmed claim's rows change only through that claim",
    "fall_through: bundle_current": "implied by turn_as: the reservation's predecessor is the claim's own turn",
    "fall_through: not_terminal": "covered downstream: mark_attempted refuses an ended session and the claim is "
                                  "retired",
    "fall_through: no_reservation": "as for claim: needs two questions claimed in one turn at once",
    "mark_attempted: reservation_is": "implied by the responder holding the only reservation the claim wrote",
    "mark_attempted: reservation_unattempted": "a second mark by the same responder never happens in the catalog",
    "finish_reservation: reservation_is": "implied by delivery_is: the claim and its reservation go together",
    "finish_reservation: delivery_is": "implied by reservation_is (each alone is enough for the other's job)",
    "to_start_event: reservation_is": "implied by delivery_is, as for finish_reservation",
    "to_start_event: delivery_is": "implied by reservation_is, as for finish_reservation",
    "start_from_queue: not_terminal": "covered twice over: the drained prompt's dispatch (set_dispatch) refuses an "
                                      "ended session, and a cancel's fence covers every generation it knew",
    "set_dispatch: not_terminal": "covered twice over: admission and the queue drain refuse an ended session, and "
                                  "a cancel after admission fences the very generation the prompt carries",
    "admit_watchdog_prompt: not_terminal": "implied: an ended session's turn is closed, and the write needs it open",
}
