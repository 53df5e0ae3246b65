"""Addresses and ports for frameworks' rendezvous."""

from __future__ import annotations

import contextlib
import socket
import struct


def free_ports(count: int = 1) -> list[int]:
    """``count`` distinct TCP ports free right now on every interface (bound together, then released)."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in sockets:
            s.bind(("", 0))
        return [s.getsockname()[1] for s in sockets]


_listening: dict[int, socket.socket] = {}  # this worker's sockets bound by listen_on_node, by port


def listen_on_node(loopback: bool) -> tuple[str, int]:
    """Bind a listening TCP socket on a port the kernel picks, on the address other processes reach
    this node at (127.0.0.1 when ``loopback``), and hold it here for ``take_listening_socket``: the
    port is this process's from the start, never picked, released and bound again later (which
    another process may do in between)."""
    import ray

    host = "127.0.0.1" if loopback else ray.util.get_node_ip_address()
    sock = socket.create_server((host, 0), family=socket.AF_INET6 if ":" in host else socket.AF_INET,
                                backlog=socket.SOMAXCONN)
    port = sock.getsockname()[1]
    _listening[port] = sock
    return host, port


def take_listening_socket(port: int) -> socket.socket | None:
    """The socket ``listen_on_node`` bound for ``port`` in this process (the caller owns it now), or None."""
    return _listening.pop(port, None)


def host_and_ports(loopback: bool, count: int) -> tuple[str, list[int]]:
    """The address other processes reach this node at (127.0.0.1 when ``loopback``) and free ports."""
    import ray

    return ("127.0.0.1" if loopback else ray.util.get_node_ip_address()), free_ports(count)


def interface_of(ip: str) -> str | None:
    """The name of the network interface that holds IPv4 address ``ip`` (its primary address), or
    None where that cannot be told (not Linux). Frameworks that bind by interface name (gloo's
    ``GLOO_SOCKET_IFNAME``) bind the one Ray's node address is on with it."""
    try:
        import fcntl
        names = [name for _, name in socket.if_nameindex()]
    except (ImportError, OSError, AttributeError):
        return None
    siocgifaddr = 0x8915
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for name in names:
            try:
                answer = fcntl.ioctl(s.fileno(), siocgifaddr, struct.pack("256s", name.encode()[:15]))
            except OSError:  # no IPv4 address
                continue
            if socket.inet_ntoa(answer[20:24]) == ip:
                return name
    return None
