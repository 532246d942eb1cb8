"""Ports for servers a caller starts later in another process (the stack's API, agent and emulator).

`bind(0)` hands out a port from the kernel's ephemeral range, which is also where every outgoing connection
takes its local port; on a busy machine one of those can take the port between the caller closing its probe
and the child binding it, and the child then fails to start. Ports below that range are never handed to
client sockets, so a port found free there stays free for the child.
"""
from __future__ import annotations

import random
import socket
from pathlib import Path

SPAN = 12_000


def ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def free_port() -> int:
    """A port nothing listens on, below the ephemeral range (random, so parallel callers rarely meet)."""
    high = max(ephemeral_low(), 1024 + SPAN)
    rng = random.SystemRandom()
    for _ in range(500):
        port = rng.randrange(high - SPAN, high)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port below the ephemeral range")
