"""Both stores behind one fixture: every contract test runs against the MemoryStore and the DynamoStore on the
serialised emulator. A divergence between them fails the suite."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from chalicelib.store.dynamo import DynamoStore
from chalicelib.store.memory import MemoryStore
from scripts.local.emulator import EmulatorThread
from tests.support.stores import dynamo_store

STORES = ("memory", "dynamo")


@pytest.fixture(scope="module")
def tables(emulator: EmulatorThread) -> Iterator[DynamoStore]:
    yield dynamo_store(emulator.url)


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest) -> Any:
    if request.param == "memory":
        return MemoryStore()
    return request.getfixturevalue("tables")
