"""The agent runtime (agentctl) as the backend sees it: prompt and cancel, with bounded timeouts."""
from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Protocol


class PromptOutcome(StrEnum):
    ACCEPTED = "accepted"
    REJECTED = "rejected"


class AgentctlAmbiguous(Exception):
    """A timeout or transport error after the call was attempted: the agent may or may not have it."""


@dataclass(frozen=True)
class PromptRequest:
    session_id: str
    execution_id: str
    prompt_generation: int
    turn_id: str
    text: str
    agent_token: str


@dataclass(frozen=True)
class CancelRequest:
    session_id: str
    execution_id: str
    prompt_generation: int
    silent: bool


class Agentctl(Protocol):
    def prompt(self, request: PromptRequest) -> PromptOutcome:
        """ACCEPTED (202) or REJECTED (409); raises AgentctlAmbiguous on timeout/transport failure."""
        ...

    def cancel(self, request: CancelRequest) -> None: ...


class HttpAgentctl:
    def __init__(self, base_url: str, timeout: float = 10.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout

    def prompt(self, request: PromptRequest) -> PromptOutcome:
        status = self._post("/prompt", asdict(request))
        if status in (200, 201, 202):
            return PromptOutcome.ACCEPTED
        if 400 <= status < 500 or status == 503:
            return PromptOutcome.REJECTED
        raise AgentctlAmbiguous(f"agentctl answered {status}")

    def cancel(self, request: CancelRequest) -> None:
        self._post("/cancel", asdict(request))

    def steer(self, request: PromptRequest) -> bool:
        """Inject a message into the running turn; False when the runtime does not support steering."""
        return self._post("/steer", asdict(request)) in (200, 201, 202)

    def _post(self, path: str, body: dict[str, object]) -> int:
        req = urllib.request.Request(self.base_url + path, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return int(resp.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, ConnectionRefusedError):
                return 503  # nothing was sent: a definite failure, not an ambiguous one
            raise AgentctlAmbiguous(str(exc)) from exc
        except (TimeoutError, OSError) as exc:
            raise AgentctlAmbiguous(str(exc)) from exc
