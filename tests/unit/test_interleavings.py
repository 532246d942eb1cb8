"""The interleaving explorer's tests: every operation raced by every other at each of its durable boundaries
on the in-memory store, and one case per operation pair on the emulator store (tests/support/explorer.py)."""
from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from scripts.local.emulator import EmulatorThread
from tests.support.crash import WRITE_METHODS
from tests.support.explorer import (
    ALLOWED_UNREACHED,
    CATALOG,
    EmulatorTables,
    Operation,
    _run,
    _setup,
    boundaries,
    emulator_world,
    explore,
    world,
)

REPORT = Path(__file__).resolve().parents[2] / "artifacts" / "interleavings.txt"


@pytest.mark.timeout(1200)
def test_interleavings__every_operation_raced_at_every_boundary__invariants_hold() -> None:
    started = time.perf_counter()
    cases, reached = explore(CATALOG)
    elapsed = time.perf_counter() - started
    failed = [c for c in cases if c.problems]
    valid = sum(c.valid for c in cases)
    print(f"\ninterleaving explorer: {len(cases)} cases ({len(CATALOG)} operations x their boundaries x "
          f"{len(CATALOG) - 1} interferers; {valid} with the interferer acting), {len(reached)} write "
          f"boundaries reached; {elapsed:.1f} s")
    report = [f"[{c.operation} | paused {c.boundary} | {c.interferer}] {p}" for c in failed for p in c.problems]
    REPORT.parent.mkdir(exist_ok=True)
    REPORT.write_text("\n".join([f"{len(cases)} cases, {valid} with the interferer acting; {elapsed:.1f} s",
                                 f"violations: {len(report)}", *report]) + "\n")
    assert not report, f"{len(report)} invariant violations:\n" + "\n".join(report[:40])
    unreached = WRITE_METHODS - reached - set(ALLOWED_UNREACHED)
    assert not unreached, f"write boundaries no operation reaches: {sorted(unreached)}"
    assert valid > len(cases) // 2


@pytest.mark.parametrize("name", [op.name for op in CATALOG])
def test_interleavings__catalog_operation__valid_in_its_own_world(name: str) -> None:
    op = next(o for o in CATALOG if o.name == name)
    w = world()
    ctx = _setup(op, w)
    assert _run(op, w, w.deps, ctx) != "invalid"
    assert boundaries(op), f"{name} passes no durable boundary"


@pytest.mark.timeout(1200)
def test_interleavings__a_case_per_operation_pair_on_the_emulator_store__stores_agree_and_invariants_hold(
        emulator: EmulatorThread) -> None:
    """The sampled subset on the emulator store: every (operation, interferer) pair once, at a boundary picked
    by a seeded draw, with the DynamoStore in lockstep (see Lockstep)."""
    started = time.perf_counter()
    rng = random.Random(11)
    picks: dict[tuple[str, str], int] = {}
    counts = {op.name: len(boundaries(op)) for op in CATALOG}

    def sample(op: Operation, index: int, other: Operation) -> bool:
        pick = picks.setdefault((op.name, other.name), rng.randrange(counts[op.name]))
        return index == pick
    cases, _ = explore(CATALOG, sample, emulator_world(EmulatorTables(emulator.url)))
    elapsed = time.perf_counter() - started
    report = [f"[{c.operation} | paused {c.boundary} | {c.interferer}] {p}" for c in cases for p in c.problems]
    print(f"\ninterleaving explorer on the emulator store: {len(cases)} cases, one per operation pair; "
          f"{elapsed:.1f} s")
    assert len(cases) == len(CATALOG) * (len(CATALOG) - 1)
    assert not report, f"{len(report)} problems:\n" + "\n".join(report[:40])
