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
    Case,
    EmulatorTables,
    Operation,
    _run,
    _setup,
    boundaries,
    case,
    emulator_world,
    explore,
    reached_writes,
    world,
)

REPORTS = Path(__file__).resolve().parents[2] / "artifacts" / "interleavings"
# The catalog is explored in shards (every shard pauses its own operations, raced by the whole catalog), so
# `make test`'s workers share the work; together they are every case.
SHARDS = 6


def _shard(k: int) -> list[Operation]:
    return CATALOG[k::SHARDS]


def _report(name: str, cases: list[Case], elapsed: float) -> list[str]:
    problems = [f"[{c.operation} | paused {c.boundary} | {c.interferer}] {p}" for c in cases for p in c.problems]
    valid = sum(c.valid for c in cases)
    print(f"\ninterleaving explorer ({name}): {len(cases)} cases, {valid} with the interferer acting; {elapsed:.1f} s")
    REPORTS.mkdir(parents=True, exist_ok=True)
    (REPORTS / f"{name}.txt").write_text("\n".join([f"{len(cases)} cases, {valid} with the interferer acting; "
                                                    f"{elapsed:.1f} s", f"violations: {len(problems)}",
                                                    *problems]) + "\n")
    return problems


@pytest.mark.timeout(1200)
@pytest.mark.parametrize("shard", range(SHARDS))
def test_interleavings__every_operation_raced_at_every_boundary__invariants_hold(shard: int) -> None:
    """Single preemption at every boundary of the dry run, and again at every boundary of a path the
    interference opened (a retry, a fall-through) with the interferer running once more there."""
    started = time.perf_counter()
    cases = explore(_shard(shard), continuations=True)
    problems = _report(f"memory-{shard + 1}-of-{SHARDS}", cases, time.perf_counter() - started)
    assert not problems, f"{len(problems)} invariant violations:\n" + "\n".join(problems[:40])
    first = [c for c in cases if " | again at " not in c.boundary]
    assert len(first) == sum(len(boundaries(op)) * (len(CATALOG) - 1) for op in _shard(shard))
    assert sum(c.valid for c in first) > len(first) // 2


@pytest.mark.timeout(1200)
@pytest.mark.parametrize("shard", range(SHARDS))
def test_interleavings__the_interferer_itself_paused__sampled_per_pair__invariants_hold(shard: int) -> None:
    """Two preemptions: for every (operation, interferer) pair, the operation paused at one boundary and the
    interferer at one of its own (a draw seeded by the pair), so the operation lands inside the interferer."""
    started = time.perf_counter()
    cases = []
    for op in _shard(shard):
        for other in CATALOG:
            if other is op:
                continue
            draw = random.Random(f"inside|{op.name}|{other.name}")
            k, j = draw.randrange(len(boundaries(op))), draw.randrange(len(boundaries(other)))
            cases.append(case(op, k, other, other_pause=j))
    problems = _report(f"memory-inside-{shard + 1}-of-{SHARDS}", cases, time.perf_counter() - started)
    assert not problems, f"{len(problems)} invariant violations:\n" + "\n".join(problems[:40])
    assert sum(" paused " in c.boundary for c in cases) > len(cases) // 3  # the draw is from its own dry run


def test_interleavings__every_store_write__reached_by_some_operation() -> None:
    """A new write boundary that no catalog operation reaches fails here (as in the crash-point harness)."""
    unreached = WRITE_METHODS - reached_writes() - set(ALLOWED_UNREACHED)
    assert not unreached, f"write boundaries no operation reaches: {sorted(unreached)}"
    assert sum(len(boundaries(op)) for op in CATALOG) * (len(CATALOG) - 1) > 7000


@pytest.mark.parametrize("name", [op.name for op in CATALOG])
def test_interleavings__catalog_operation__valid_in_its_own_world(name: str) -> None:
    op = next(o for o in CATALOG if o.name == name)
    w = world()
    ctx = _setup(op, w)
    assert _run(op, w, w.deps, ctx) != "invalid"
    assert boundaries(op), f"{name} passes no durable boundary"


@pytest.mark.timeout(1200)
@pytest.mark.parametrize("shard", range(SHARDS))
def test_interleavings__a_case_per_operation_pair_on_the_emulator_store__stores_agree_and_invariants_hold(
        emulator: EmulatorThread, shard: int) -> None:
    """The sampled subset on the emulator store: every (operation, interferer) pair once, at a boundary picked
    by a draw seeded by the pair, with the DynamoStore in lockstep (see Lockstep)."""
    started = time.perf_counter()
    counts = {op.name: len(boundaries(op)) for op in _shard(shard)}

    def sample(op: Operation, index: int, other: Operation) -> bool:
        return index == random.Random(f"11|{op.name}|{other.name}").randrange(counts[op.name])
    cases = explore(_shard(shard), sample, emulator_world(EmulatorTables(emulator.url)))
    problems = _report(f"emulator-{shard + 1}-of-{SHARDS}", cases, time.perf_counter() - started)
    assert len(cases) == len(_shard(shard)) * (len(CATALOG) - 1)  # one case per operation pair
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems[:40])
