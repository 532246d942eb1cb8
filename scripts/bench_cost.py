"""Dollars per million questions, from what the benchmark measured per operation and AWS's published prices.

Prices: us-east-1, on-demand, as published on each service's pricing page (checked December 2026). Lambda's
billed duration cannot be measured on the emulator, so it is modelled: the handler's measured CPU time scaled
to the function's share of a vCPU (Lambda gives one vCPU at 1,769 MB; the functions have 512 MB), plus a
round trip per DynamoDB/EventBridge request; a long poll is billed for the whole time it waits.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

# Published prices, USD.
API_GATEWAY_REST = 3.50e-6  # per request (REST API, first 333 million a month)
LAMBDA_REQUEST = 0.20e-6  # per invocation
LAMBDA_GB_SECOND = 16.6667e-6  # x86
DYNAMODB_WRU = 0.625e-6  # on-demand, per write request unit
DYNAMODB_RRU = 0.125e-6  # on-demand, per read request unit (streams read by Lambda triggers: free)
EVENTBRIDGE_EVENT = 1.00e-6  # per custom event (64 KB chunk)
STEP_FUNCTIONS_TRANSITION = 25e-6  # Standard workflows, per state transition
DURABLE_OPERATION = 8e-6  # Lambda durable functions, per durable operation (AWS's worked example rate)

MEMORY_GB = 0.5  # .chalice/config.json: lambda_memory_size 512
CPU_SCALE = 1769 / 512  # a 512 MB function has 512/1769 of a vCPU
ROUND_TRIP_S = 0.005  # assumed per AWS request from Lambda in the region (DynamoDB: single-digit ms)
LIVE_ANSWER_AFTER_S = 30.0  # how long the user takes to answer, in the live scenario
WAIT_WINDOW_S = 25  # the agent's long poll (API.md: timeout ≤ 25 s)


class Measured(Protocol):
    """One benchmark row, per call."""

    name: str
    api_calls: float  # API Gateway requests (each also invokes the authorizer: ttl 0)
    cpu_s: float  # the handler's own CPU
    waits_s: float  # time the handler spends waiting (a long poll's window)
    requests: float  # AWS requests of the handler and of the stream functions it causes
    stream_invocations: float
    stream_cpu_s: float
    wcu: float
    rcu: float
    bus_entries: float


@dataclass
class Cost:
    api_gateway: float = 0.0
    lambda_requests: float = 0.0
    lambda_duration: float = 0.0
    dynamodb: float = 0.0
    eventbridge: float = 0.0

    @property
    def total(self) -> float:
        return self.api_gateway + self.lambda_requests + self.lambda_duration + self.dynamodb + self.eventbridge

    def add(self, row: Measured, times: float, authorizer_cpu_s: float) -> None:
        seconds = (row.cpu_s + row.stream_cpu_s + row.api_calls * authorizer_cpu_s) * CPU_SCALE \
            + row.requests * ROUND_TRIP_S + row.waits_s
        self.api_gateway += times * row.api_calls * API_GATEWAY_REST
        self.lambda_requests += times * (2 * row.api_calls + row.stream_invocations) * LAMBDA_REQUEST
        self.lambda_duration += times * seconds * MEMORY_GB * LAMBDA_GB_SECOND
        self.dynamodb += times * (row.wcu * DYNAMODB_WRU + row.rcu * DYNAMODB_RRU)
        self.eventbridge += times * row.bus_entries * EVENTBRIDGE_EVENT


def scenarios(rows: Sequence[Measured], authorizer_cpu_s: float) -> dict[str, Cost]:
    """A question's life, per question: detached (the agent moves on and is resumed by the answer), and live
    (the agent long-polls until the user answers LIVE_ANSWER_AFTER_S later, then confirms)."""
    by = {row.name: row for row in rows}

    def life(parts: list[tuple[str, float]]) -> Cost:
        cost = Cost()
        for name, times in parts:
            cost.add(by[name], times, authorizer_cpu_s)
        return cost
    idle_window = next(n for n in by if n.startswith("wait poll (nobody answers"))
    windows = LIVE_ANSWER_AFTER_S / by[idle_window].waits_s  # the agent's long polls while the user thinks
    return {
        "detached": life([("ask (agent)", 1), ("detach", 1), ("respond (detached → resumed)", 1)]),
        f"live, answered after {LIVE_ANSWER_AFTER_S:.0f} s": life([
            ("ask (agent)", 1), (idle_window, windows), ("wait poll (until the answer)", 1),
            ("respond (live, confirmed)", 1), ("confirm", 1)]),
    }


def per_million(cost: Cost) -> dict[str, float]:
    return {"API Gateway": cost.api_gateway * 1e6, "Lambda requests": cost.lambda_requests * 1e6,
            "Lambda duration": cost.lambda_duration * 1e6, "DynamoDB": cost.dynamodb * 1e6,
            "EventBridge": cost.eventbridge * 1e6, "total": cost.total * 1e6}
