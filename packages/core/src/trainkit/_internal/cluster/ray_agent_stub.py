"""Stand-ins for Ray's two per-node agents on the embedded cluster (see ``ray_patches._lean_raylet``).

    python -S ray_agent_stub.py                         # the dashboard agent: nothing to serve
    python -S ray_agent_stub.py --on-first-use AGENT... # the runtime env agent, started when first used

The raylet starts both and fate-shares with them, so each stays up until its raylet is gone. The
runtime env agent is needed only by a task or actor with a ``runtime_env``: its stand-in listens on
the agent's address, reports that port as the agent would, and on the first connection becomes
the real agent (``exec``: same process, so the raylet still watches it) on that same port; the
raylet's client retries the connection that woke it. Run with ``python -S``: it imports no package.
"""

import os
import select
import socket
import sys
import time


def _flag(argv: list[str], name: str) -> str:
    return next(arg.split("=", 1)[1] for arg in argv if arg.startswith(f"--{name}="))


def _raylet_alive(raylet: int) -> bool:
    return os.getppid() == raylet  # reparented: the raylet died without stopping its agents


def stand_in() -> None:
    raylet = os.getppid()
    while _raylet_alive(raylet):
        time.sleep(1.0)


def _shared_socket() -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    return sock


def on_first_use(agent: list[str]) -> None:
    raylet, host = os.getppid(), _flag(agent, "node-ip-address")
    with _shared_socket() as server:
        server.bind((host, 0))
        server.listen()
        port = server.getsockname()[1]
        port_file = os.path.join(_flag(agent, "session-dir"), f"runtime_env_agent_port_{_flag(agent, 'node-id')}")
        with open(f"{port_file}.tmp", "w") as f:
            f.write(str(port))
        os.replace(f"{port_file}.tmp", port_file)  # the raylet never reads half a port
        while not select.select([server], [], [], 1.0)[0]:
            if not _raylet_alive(raylet):
                return
        # The listener closes at the exec; the agent binds the port a second or more later (its
        # imports). Meanwhile this socket, bound and not listening, holds the port through the exec
        # (else another process may take it, the agent fails to bind, and the raylet, which
        # fate-shares with it, exits). The agent's bind sets SO_REUSEADDR: it binds beside the hold.
        hold = _shared_socket()
        hold.bind((host, port))
        hold.set_inheritable(True)
    agent = [f"--runtime-env-agent-port={port}" if arg.startswith("--runtime-env-agent-port=") else arg
             for arg in agent]
    os.execv(agent[0], agent)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--on-first-use"]:
        on_first_use(sys.argv[2:])
    else:
        stand_in()
