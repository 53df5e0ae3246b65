"""Addresses and ports for frameworks' rendezvous."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now on ``host`` (the OS picks it)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def free_address(loopback: bool) -> tuple[str, int]:
    """This node's address (127.0.0.1 when ``loopback``) and a TCP port free on it."""
    import ray

    host = "127.0.0.1" if loopback else ray.util.get_node_ip_address()
    return host, free_port(host)
