"""Addresses and ports for frameworks' rendezvous."""

from __future__ import annotations

import contextlib
import socket


def free_ports(count: int = 1) -> list[int]:
    """``count`` distinct TCP ports free right now on every interface (bound together, then released)."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in sockets:
            s.bind(("", 0))
        return [s.getsockname()[1] for s in sockets]


def host_and_ports(loopback: bool, count: int) -> tuple[str, list[int]]:
    """The address other processes reach this node at (127.0.0.1 when ``loopback``) and free ports."""
    import ray

    return ("127.0.0.1" if loopback else ray.util.get_node_ip_address()), free_ports(count)
