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


_held: dict[int, socket.socket] = {}  # this worker's ports held by hold_ports, by port


def hold_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports, each held in this process by a socket bound on every interface
    that does not listen, with SO_REUSEADDR, until ``release_port`` or this process's end. While
    held, no other process binds the port, nor does the kernel give it to a connection; a server
    that sets SO_REUSEADDR itself (gRPC's, asyncio's, ``socket.create_server``) binds it beside the
    hold (Linux lets two reusable sockets share a port while neither listens)."""
    sockets = []
    for _ in range(count):
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("", 0))
        sockets.append(sock)
    ports = [s.getsockname()[1] for s in sockets]
    _held.update(zip(ports, sockets))
    return ports


def release_port(port: int) -> None:
    """Let go of a port ``hold_ports`` holds in this process (none held: nothing to do): for a
    framework whose server binds without SO_REUSEADDR, just before it binds."""
    sock = _held.pop(port, None)
    if sock is not None:
        sock.close()


def host_and_ports(loopback: bool, count: int, hold: bool = False) -> tuple[str, list[int]]:
    """The address other processes reach this node at (127.0.0.1 when ``loopback``) and ``count``
    ports, held here (``hold_ports``) or free now."""
    import ray

    host = "127.0.0.1" if loopback else ray.util.get_node_ip_address()
    return host, hold_ports(count) if hold else free_ports(count)


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
