"""The explorer can see: with any one claim condition removed (or one fence taken down), it reports a
violation. Each mutant is hunted over the cases that pass through the writes it changes (the paused
operation's or the interferer's), the likeliest first, until the first case that catches it.

The table (condition removed -> how many cases ran until one caught it, and which) is printed and written to
artifacts/interleavings/mutations.txt.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest

from tests.support.explorer import CATALOG, Case, Operation, boundaries, case
from tests.support.mutations import MUTANTS, UNOBSERVABLE, Mutant

REPORT = Path(__file__).resolve().parents[2] / "artifacts" / "interleavings" / "mutations.txt"
SHARDS = 4


def _writes(op: Operation) -> set[str]:
    return {label.split(".", 1)[1] for label in boundaries(op) if label.startswith("before store.")}


def _candidates(mutant: Mutant) -> list[tuple[Operation, int, Operation]]:
    touched = set(mutant.writes)
    passes = {op.name: bool(_writes(op) & touched) for op in CATALOG}
    ranked = []
    for op in CATALOG:
        for k in range(len(boundaries(op))):
            for other in CATALOG:
                if other is op or not (passes[op.name] or passes[other.name]):
                    continue
                ranked.append((-(passes[op.name] + passes[other.name]), op.name, k, other.name, (op, k, other)))
    return [c[-1] for c in sorted(ranked, key=lambda r: r[:4])]


def _landing_inside(mutant: Mutant) -> list[tuple[Operation, int, Operation, int]]:
    """Two preemptions: an operation paused right before a mutated write, the write then landing inside an
    interferer held at each of its boundaries in turn."""
    out = []
    for op in CATALOG:
        labels = boundaries(op)
        for k in [i for i, label in enumerate(labels) if label in {f"before store.{w}" for w in mutant.writes}]:
            out += [(op, k, other, j) for other in CATALOG if other is not op
                    for j in range(len(boundaries(other)))]
    return out


def _violations(found: Case) -> list[str]:
    """What the case found wrong; a paused operation that took another path is no finding."""
    return [p for p in found.problems if not p.startswith("never reached boundary")]


def _caught(mutant: Mutant, run: Callable[[], Case]) -> Case | None:
    """The case's finding under `mutant`, unless the clause it covers for shows the same alone."""
    with mutant.apply():
        found = run()
    if not _violations(found):
        return None
    if mutant.cover is not None:
        with mutant.cover.apply():
            if _violations(run()):
                return None
    return found


def hunt(mutant: Mutant) -> tuple[int, Case | None]:
    single = _candidates(mutant)  # dry runs under the real code, before the mutation
    double = _landing_inside(mutant)
    for n, (op, k, other) in enumerate(single, 1):
        found = _caught(mutant, partial(case, op, k, other))
        if found is not None:
            return n, found
    for n, (op, k, other, j) in enumerate(double, len(single) + 1):
        found = _caught(mutant, partial(case, op, k, other, other_pause=j))
        if found is not None:
            return n, found
    return len(single) + len(double), None


def _shard(k: int) -> list[Mutant]:
    return [m for m in MUTANTS if m.name not in UNOBSERVABLE][k::SHARDS]


def test_unobservable__names_real_mutants() -> None:
    assert set(UNOBSERVABLE) <= {m.name for m in MUTANTS}


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("shard", range(SHARDS))
def test_explorer__every_claim_condition_and_fence_removed__reports_a_violation(shard: int) -> None:
    started = time.perf_counter()
    rows, missed = [], []
    for mutant in _shard(shard):
        ran, caught = hunt(mutant)
        if caught is None:
            missed.append(mutant.name)
            rows.append(f"{mutant.name:45} NOT CAUGHT after {ran} cases")
        else:
            rows.append(f"{mutant.name:45} caught after {ran:4} cases: [{caught.operation} | paused "
                        f"{caught.boundary} | {caught.interferer}] {_violations(caught)[0][:150]}")
    print(f"\nexplorer mutation test, shard {shard + 1}/{SHARDS} ({time.perf_counter() - started:.1f} s):")
    print("\n".join(rows))
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    with REPORT.open("a") as out:
        out.write("\n".join(rows) + "\n")
    assert not missed, f"the explorer saw no violation with these removed: {missed}"


def test_mutant__the_clause_holds_inside_its_write_only() -> None:
    from chalicelib.store import conditions
    from chalicelib.store.document import Equals
    from tests.support.mutations import without_clause
    with without_clause("confirm_delivery", "delivery_live"):
        assert conditions.delivery_live("b") == Equals(("bundles", "b", "delivery", "mode"), "live")
