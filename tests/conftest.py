"""Shared fixtures. `stack` is the real thing in one process: serialised moto server, tables created from
the models, the Chalice app behind the local gateway, the stream pump and the simulated agent."""
from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.chdir(ROOT)

from scripts.local.emulator import EmulatorThread  # noqa: E402
from scripts.local.sim_agent import SimAgent  # noqa: E402
from scripts.local.stack import LocalStack  # noqa: E402
from tests.support.flow import ApiClient  # noqa: E402


@pytest.fixture(scope="session")
def emulator() -> Iterator[EmulatorThread]:
    emu = EmulatorThread().start()
    yield emu
    emu.stop()


@pytest.fixture
def sim() -> Iterator[SimAgent]:
    agent = SimAgent("http://127.0.0.1:9", port=0).start()
    yield agent
    agent.stop()


@pytest.fixture
def stack(emulator: EmulatorThread, sim: SimAgent) -> Iterator[LocalStack]:
    st = LocalStack(agentctl_url=sim.url).start(endpoint=emulator.url)
    sim.api_url = st.url
    yield st
    sim.stop()
    st.stop()


@pytest.fixture(scope="module")
def shared(emulator: EmulatorThread) -> Iterator[tuple[LocalStack, SimAgent]]:
    """One stack per test module (tables are costly to create); its tests work in their own tasks."""
    agent = SimAgent("http://127.0.0.1:9", port=0).start()
    stack = LocalStack(agentctl_url=agent.url).start(endpoint=emulator.url)
    agent.api_url = stack.url
    yield stack, agent
    agent.stop()
    stack.stop()


@pytest.fixture
def user(stack: LocalStack) -> ApiClient:
    return ApiClient(stack.url, stack.user_token())


# The longest tests, longest first: `make test` runs the suite on several workers that take one test at a
# time (pytest-xdist, --maxschedchunk 1), so starting these first keeps any worker from ending on one of them.
LONGEST_FIRST = (
    "tests/e2e/test_load.py::",
    "tests/unit/test_interleavings.py::test_interleavings__a_case_per_operation_pair",
    "tests/contract/test_differential.py::",
    "tests/integration/test_concurrency.py::",
    "tests/unit/test_crash_points.py::test_crash_points__every_write_boundary",
    "tests/unit/test_interleavings.py::test_interleavings__every_operation_raced",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        return next((i for i, prefix in enumerate(LONGEST_FIRST) if item.nodeid.startswith(prefix)),
                    len(LONGEST_FIRST))
    items.sort(key=rank)  # stable: everything else keeps its order
