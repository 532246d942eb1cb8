"""agentctl's cancel fence, exactly as ../shared/API.md states it: a cancel refuses (409) every later prompt
(a steered message included) that carries the cancelled generation or an older one. Clarify relies on it,
beside its own check before each dispatch, so that no prompt reaches an agent after its session ended. The
simulated agent and the tests' fake agentctl both hold it through this one class."""
from __future__ import annotations

import threading

ENDED = 2**62  # the runtime ended the session itself: nothing is taken any more


def _generation(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class CancelFence:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cancelled: dict[str, int] = {}

    def cancel(self, session_id: str, generation: object) -> bool:
        """Fence `generation` and every older one; False (nothing fenced) when it is not a generation."""
        g = _generation(generation)
        if g is None:
            return False
        with self._lock:
            self._cancelled[session_id] = max(self._cancelled.get(session_id, -1), g)
        return True

    def end(self, session_id: str) -> None:
        self.cancel(session_id, ENDED)

    def admits(self, session_id: str, generation: object) -> bool:
        """A prompt or steer may be taken: it carries a generation newer than every cancelled one."""
        g = _generation(generation)
        with self._lock:
            return g is not None and g > self._cancelled.get(session_id, -1)
