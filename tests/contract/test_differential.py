"""The two stores in lockstep: seeded random sequences of aggregate writes, many of them meant to fail, run
against the MemoryStore and the DynamoStore; after every step both must have answered alike (the same
aggregate, or the same error carrying the same current item)."""
from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from chalicelib.domain import clarify
from chalicelib.domain.errors import DomainError
from chalicelib.domain.model import DeferredReady, Dispatch, Session, StartEvent, State, Turn
from chalicelib.domain.rules import archivable, moved_on
from chalicelib.store.dynamo import DynamoStore
from chalicelib.store.memory import MemoryStore
from chalicelib.store.protocol import Remembered
from chalicelib.store.writes import ConditionalWrites
from tests.contract.builders import answers, bundle, delivery, prompt, reservation, row, session, watchdog

SEQUENCES, MAX_SEQUENCES, STEPS = 18, 60, 40
ALL = tuple(State)
LIVE = tuple(s for s in State if s not in (State.COMPLETED, State.FAILED, State.CANCELLED))
Op = tuple[str, dict[str, Any]]


def _stamp(n: int) -> str:
    return f"2025-01-01T12:{n // 60:02d}:{n % 60:02d}.000000Z"


class Generator:
    """Picks a plausible next write from the current aggregate, and sometimes a stale or wrong one."""

    def __init__(self, rng: random.Random, sid: str) -> None:
        self.rng, self.sid, self.n = rng, sid, 0

    def pick(self, s: Session) -> Op:
        self.n += 1
        at = _stamp(self.n)
        r = self.rng
        turn = s.current_turn
        bundles = [b.id for b in s.bundles] or [f"{self.sid}.none"]
        b = s.bundle(r.choice(bundles))
        pending = clarify.pending_rows(s, b) if b is not None else []
        rows = pending or ["q1"]
        wrong = r.random() < 0.2
        expected = ("stale" if wrong else (turn.id if turn else None))
        new_turn = Turn(f"t{self.n}", s.turn_seq + 1, at)
        d = b.delivery if b is not None else None
        closed = [x for x in s.bundles if archivable(s, x)]
        choices: list[Callable[[], Op]] = [
            lambda: ("start_turn", dict(expected_turn_id=expected, from_states=r.sample(ALL, 3), turn=new_turn,
                                        prompt=r.choice([None, prompt(f"m{self.n}", new_turn.id, s.generation + 1)]),
                                        state=r.choice(LIVE), at=at)),
            lambda: ("add_bundle", dict(bundle=bundle(self.sid, f"b{self.n}", new_turn if r.random() < .5 else (
                turn or new_turn), row("q1"), row("q2")), expected_turn_id=expected,
                new_turn=r.choice([None, new_turn]), from_states=LIVE, state=State.WAITING_FOR_INPUT, at=at)),
            lambda: ("detach_rows", dict(rows={b.id if b else "x": rows}, at=at)),
            lambda: ("detach_rows", dict(rows=clarify.current_turn_detachable(s) or {"x.y": ["q1"]}, at=at,
                                         complete_turn_id=turn.id if turn else "t0", from_state=s.state,
                                         to_state=State.IDLE)),
            lambda: ("close_rows", dict(bundle_id=b.id if b else "x", row_ids=rows, status="cancelled", at=at)),
            lambda: ("transition", dict(to=r.choice(ALL), from_states=r.sample(ALL, 4), at=at,
                                        expire=clarify.current_turn_pending(s))),
            lambda: ("complete_turn", dict(turn_id=turn.id if turn else "t0", from_state=r.choice([s.state, *LIVE]),
                                           to_state=State.IDLE, at=at)),
            lambda: ("renew_waiter", dict(bundle_id=b.id if b else "x", row_ids=rows, until=_stamp(self.n + 30),
                                          at=at)),
            lambda: ("claim", dict(bundle_id=b.id if b else "x", responses=answers(*rows), status="answered",
                                   delivery=delivery(f"d{self.n}", tuple(rows), r.choice(["live", "live", "detached"])),
                                   reservation=r.choice([None, reservation(b.id if b else "x", f"t{self.n}")]),
                                   at=at)),
            lambda: ("confirm_delivery", dict(bundle_id=b.id if b else "x",
                                              delivery_id=d.delivery_id if d and not wrong else "d0",
                                              result="live", watchdog=None if r.random() < .2 else watchdog(
                                                  b.id if b else "x", turn.id if turn else "t1"),
                                              at=at)),
            lambda: ("restore_claim", dict(bundle_id=b.id if b else "x", delivery_id=d.delivery_id if d else "d0",
                                           row_ids=list(d.row_ids) if d else ["q1"], outcome="answered",
                                           detach=r.random() < .5, at=at, reservation=s.reservation)),
            lambda: ("retire_claim", dict(bundle_id=b.id if b else "x", delivery_id=d.delivery_id if d else "d0",
                                          row_ids=list(d.row_ids) if d else ["q1"], outcome="answered", at=at,
                                          reservation=s.reservation)),
            lambda: ("mark_attempted", dict(reservation=s.reservation or reservation("x"),
                                            prompt=prompt(f"m{self.n}", "tr", s.generation + 1, Dispatch.ATTEMPTED),
                                            at=at)),
            lambda: ("finish_reservation", dict(reservation=s.reservation or reservation("x"), result="resumed",
                                                dispatch=Dispatch.ACCEPTED, at=at)),
            lambda: ("fall_through", dict(bundle_id=b.id if b else "x", delivery_id=d.delivery_id if d else "d0",
                                          reservation=reservation(b.id if b else "x", f"t{self.n}"), at=at)),
            lambda: ("to_start_event", dict(reservation=s.reservation or reservation("x"),
                                            marker=StartEvent(s.reservation.turn_id if s.reservation else "t0", 2,
                                                              at),
                                            result="ambiguous", at=at)),
            lambda: ("clear_start_event", dict(turn_id=s.start_event.turn_id if s.start_event else "t0", at=at)),
            lambda: ("defer_ready", dict(reservation_turn_id=(s.reservation.turn_id if s.reservation and not wrong
                                                              else "t0"),
                                         ready=DeferredReady(s.generation, turn.id if turn else "t0", at))),
            lambda: ("clear_deferred_ready", dict(generation=(s.deferred_ready.generation if s.deferred_ready
                                                              and not wrong else -1), at=at)),
            lambda: ("set_dispatch", dict(message_id=s.prompt.message_id if s.prompt else "m0",
                                          expect=(s.prompt.dispatch if s.prompt and r.random() < .7
                                                  else r.choice(list(Dispatch))),
                                          to=r.choice(list(Dispatch)), at=at,
                                          deadline=r.choice([None, _stamp(self.n + 60)]),
                                          close_turn_id=r.choice([None, turn.id if turn else None]))),
            lambda: ("clear_watchdog", dict(clarification_id=s.watchdog.clarification_id if s.watchdog else "x",
                                            at=at)),
            lambda: ("admit_watchdog_prompt", dict(watchdog=s.watchdog or watchdog("x"),
                                                   prompt=prompt(f"m{self.n}", turn.id if turn else "t0"), at=at)),
            lambda: ("dismiss", dict(bundle_id=b.id if b else "x", row_ids=["q1", "q2"], user_key="uk", at=at)),
            lambda: ("admit", dict(prompt=prompt(f"m{self.n}", new_turn.id), start=r.choice([None, new_turn]),
                                   expected_turn_id=expected, from_states=LIVE,
                                   link_bundle=r.choice([None, b.id if b else None]),
                                   remember=r.choice([None, Remembered(f"k{self.sid}{self.n % 7}", "fp", {}, 1)]),
                                   queue_cap=3, at=at)),
            lambda: ("start_from_queue", dict(expected_turn_id=expected, turn=new_turn,
                                              head=s.queue[0] if s.queue else prompt("m0"), at=at)),
            lambda: ("link_late_message", dict(bundle_id=b.id if b else "x", message_id=f"m{self.n}", at=at)),
            lambda: ("remove_bundle", dict(bundle_id=b.id if b else "x", at=at)),
            lambda: ("archive_bundles", dict(session=replace(s, version=s.version - wrong),
                                             bundles=closed or ([b] if b else []), at=at)),
            lambda: ("hide_prompt", dict(message_id=s.prompt.message_id if s.prompt and not wrong else "m0",
                                         at=at)),
            lambda: ("reschedule", dict(expected_due=s.recon_due if not wrong else "2000",
                                        next_due=r.choice([None, _stamp(self.n + 90)]))),
        ]
        # Favour what the aggregate makes possible now, so deep states (claims, reservations, watchdogs,
        # queues) are reached and their writes succeed as well as fail.
        names = [c()[0] for c in choices]
        weights = [1.0] * len(choices)
        favoured = set()
        if d is not None and d.confirmed_at is None:
            favoured |= {"restore_claim", "retire_claim"}
        if s.reservation is not None:
            favoured |= {"mark_attempted", "finish_reservation", "restore_claim", "to_start_event"}
        if s.start_event is not None:
            favoured |= {"clear_start_event"}
        if s.reservation is not None:
            favoured |= {"defer_ready"}
        if s.deferred_ready is not None:
            favoured |= {"clear_deferred_ready"}
        if d is not None and d.confirmed_at is None and d.mode == "live":
            favoured |= {"fall_through", "confirm_delivery"}  # only a live claim is confirmed
        if s.watchdog is not None:
            favoured |= {"clear_watchdog", "admit_watchdog_prompt"}
        if s.prompt is not None:
            favoured |= {"set_dispatch"}
        if s.queue:
            favoured |= {"start_from_queue", "complete_turn"}
        if pending:
            favoured |= {"claim"}
        urgent = set()  # deep states that rarely last: take the write they exist for while they do
        if d is not None and d.confirmed_at is None and b is not None and moved_on(s, b):
            urgent |= {"retire_claim"}
        if s.watchdog is not None and turn is not None and turn.open and turn.id == s.watchdog.turn_id:
            urgent |= {"admit_watchdog_prompt"}
        for i, name in enumerate(names):
            if name in favoured:
                weights[i] = 6.0
            if name in urgent:
                weights[i] = 30.0
        return r.choices(choices, weights)[0]()


def _outcome(store: Any, sid: str, op: Op) -> tuple[str, Any]:
    name, kwargs = op
    try:
        return "ok", getattr(store, name)(*(() if "session" in kwargs else (sid,)), **kwargs)
    except DomainError as exc:
        return type(exc).__name__, getattr(exc, "current", None)


def test_random_write_sequences__both_stores_answer_alike(tables: DynamoStore) -> None:
    exercised: set[str] = set()
    succeeded: set[str] = set()
    steps = 0
    writes = {n for n in vars(ConditionalWrites) if not n.startswith("_")} - {
        "set_task_summary", "set_workflow_step", "rename_task", "quarantine", "set_task_activity", "add_task_session",
        "release", "list_old_task", "room"}
    sequences = 0
    for seed in range(MAX_SEQUENCES):
        if seed >= SEQUENCES and writes <= succeeded:
            break  # seeded: the same sequences every run, as many as it takes for every write to succeed
        sequences += 1
        rng = random.Random(seed)
        memory = MemoryStore()
        sid = f"d{uuid.uuid4().hex[:10]}"
        start = session(sid, bundle(sid), state=State.WAITING_FOR_INPUT)
        memory.create_session(start)
        tables.create_session(start)
        gen = Generator(rng, sid)
        for _ in range(STEPS):
            current = memory.get_session(sid)
            assert current is not None
            op = gen.pick(current)
            mine, theirs = _outcome(memory, sid, op), _outcome(tables, sid, op)
            assert mine == theirs, (seed, op)
            assert memory.get_session(sid) == tables.get_session(sid), (seed, op)
            assert memory.list_archived(sid) == tables.list_archived(sid), (seed, op)
            exercised.add(op[0])
            if mine[0] == "ok":
                succeeded.add(op[0])
            steps += 1
    assert writes <= exercised, sorted(writes - exercised)
    assert writes <= succeeded, sorted(writes - succeeded)  # each write also succeeded somewhere
    print(f"\ndifferential: {steps} steps over {sequences} sequences; {len(succeeded)} write kinds succeeded")
