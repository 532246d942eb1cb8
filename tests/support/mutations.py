"""Mutants for the explorer's own test: one condition clause of one aggregate write removed, or one fence
taken down. An explorer that reports no violation for a mutant could not have seen the defect it allows."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
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
    cover: Mutant | None = None  # removed too: a case counts only if this removal alone shows nothing there


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
    "retire_claim": ("delivery_unconfirmed", "moved_on", "reservation_unattempted", "row_has_status"),
    "restore_claim": ("delivery_unconfirmed", "not_terminal", "bundle_current", "reservation_is", "turn_is",
                      "row_has_status"),
    "fall_through": ("delivery_unconfirmed", "not_terminal", "no_reservation", "turn_as", "row_has_status"),
    "mark_attempted": ("reservation_is", "turn_is", "not_terminal"),
    "finish_reservation": ("reservation_is",),
    "to_start_event": ("reservation_is",),
}
FENCES: list[Mutant] = [
    Mutant("agentctl's cancel fence", ("set_dispatch", "mark_attempted", "admit", "start_from_queue"),
           without_agentctl_fence),
    clause_mutant("set_dispatch", "not_terminal"),  # Clarify's own check before a prompt's dispatch
    clause_mutant("start_from_queue", "not_terminal"),
    clause_mutant("admit_watchdog_prompt", "not_terminal"),
]


def together(mutant: Mutant, cover: Mutant) -> Mutant:
    """A clause that another check downstream covers, removed with that check: the explorer must find a case
    where the pair is a violation and `cover` removed alone is not (so the clause is what refused there)."""
    @contextmanager
    def apply() -> Iterator[None]:
        with ExitStack() as stack:
            stack.enter_context(mutant.apply())
            stack.enter_context(cover.apply())
            yield
    return Mutant(f"{mutant.name} (+ {cover.name})", mutant.writes, apply, cover)


# Clauses another check of the same path covers (removed alone, that check refuses instead, and the user is
# told the same): each is removed together with what covers it.
COVERED_BY: dict[str, tuple[Mutant, str]] = {
    "fall_through: not_terminal": (clause_mutant("mark_attempted", "not_terminal"),
                                   "a fall-through on an ended session reserves, then mark_attempted refuses and "
                                   "the claim is retired: the user is told the question moved on either way"),
    "set_dispatch: not_terminal": (FENCES[0], "a prompt admitted before the session ended carries a generation "
                                              "the cancel fences, so agentctl refuses it"),
}
MUTANTS: list[Mutant] = [
    together(m, COVERED_BY[m.name][0]) if m.name in COVERED_BY else m
    for m in [clause_mutant(w, c) for w, clauses in CLAIM_CONDITIONS.items() for c in clauses] + FENCES]

# Removals the explorer does not see, each with why: a clause another clause of the same path already
# enforces on every reachable interleaving. They are not hunted (each costs thousands of cases) and not
# counted as caught.
UNOBSERVABLE: dict[str, str] = {
    "retire_claim: moved_on": "implied by monotonicity: a turn never moves back and an ended session never lives "
                              "again, and every caller decided on a read that saw it moved on",
    "retire_claim: reservation_unattempted": "implied: mark_attempted needs the question's turn current and the "
                                             "session live, which a moved-on question never has again",
    "retire_claim: row_has_status": "implied: an unconfirmed claim's rows change only through that claim",
    "mark_attempted: reservation_is": "implied: with no reservation the write's own update of it fails (DynamoDB "
                                      "refuses a nested update of a missing map); another claim's reservation "
                                      "in the same turn is either held by a responder still running (three "
                                      "actors interleaved) or attempted, and then the turn moved (turn_is)",
    "finish_reservation: reservation_is": "its only effect on a stale acknowledgement after the reconciler already "
                                          "recovered the reservation is to say 'resumed' over 'ambiguous'; dropping "
                                          "a newer reservation needs three actors interleaved (beyond two "
                                          "preemptions); the contract cases finish_reservation/gone pin it",
    "to_start_event: reservation_is": "as for finish_reservation (contract case to_start_event/another "
                                      "reservation pins it)",
}
