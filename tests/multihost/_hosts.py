"""Hosts as Linux network namespaces: each has its own address on a private /24, and all are joined
by a bridge that lives in a namespace of its own (nothing is added to the machine's own network, and
no packet leaves these namespaces). Names carry the creating process's id, so runs can coexist, and a
run killed earlier is cleaned up by the next (``remove_stale``).

Used by conftest.py (which builds the cluster) and by _driver.py (which runs on the head host and cuts
or restores a link, or restarts a host's Ray node, mid-run).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from trainkit.testing import subprocesses

SUBNET = "10.213.7"  # a private /24 that is only ever assigned inside these namespaces
PREFIX = "tkmh"
RAY_PORT = 6379  # each namespace has its own ports: fixed ones cannot collide with another run
S3_PORT = 8333
# a lost node is noticed within ~5 s rather than Ray's default ~30 s, with room for a raylet that
# answers slowly on a loaded 2-core machine. A node cut off from the head keeps its processes for
# 10 minutes (Ray's default: 60 s), as a real machine behind a partition does
RAY_SYSTEM_CONFIG = {"health_check_initial_delay_ms": 0, "health_check_period_ms": 1000,
                     "health_check_timeout_ms": 1000, "health_check_failure_threshold": 5,
                     "gcs_rpc_server_reconnect_timeout_s": 600}


def sh(*args: str, check: bool = True, timeout: float = 60, env: dict | None = None) -> subprocess.CompletedProcess:
    # not subprocesses.run: `ray start` leaves its node running in the group that would end it
    done = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env)
    if check and done.returncode:
        raise RuntimeError(f"{' '.join(args)} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return done


@dataclass
class Host:
    name: str      # the network namespace
    ip: str
    link: str      # its interface (the bridge side is `link` + "b", in the switch namespace)
    temp_dir: str  # Ray's --temp-dir: Ray's nodes share /tmp/ray otherwise
    num_cpus: int

    def run(self, *args: str, check: bool = True, timeout: float = 60,
            env: dict | None = None) -> subprocess.CompletedProcess:
        return sh("ip", "netns", "exec", self.name, *args, check=check, timeout=timeout, env=env)

    def popen(self, args: list[str], log: Path) -> subprocess.Popen:
        return subprocesses.start(["ip", "netns", "exec", self.name, *args], stdout=open(log, "wb"),
                                  stderr=subprocess.STDOUT)


@dataclass
class Cluster:
    switch: str
    root: str
    hosts: list[Host] = field(default_factory=list)
    python: str = sys.executable

    @property
    def head(self) -> Host:
        return self.hosts[0]

    @property
    def ray_address(self) -> str:
        return f"{self.head.ip}:{RAY_PORT}"

    def env(self, **extra: str) -> dict:
        """The environment of every process of the cluster: Ray's token authentication, with this
        cluster's own token (never the user's ~/.ray/auth_token); a node registering slowly on a
        loaded machine is waited for (Ray gives up after 30 s by default)."""
        return {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": f"{self.root}/auth_token",
                "RAY_USAGE_STATS_ENABLED": "0", "RAY_raylet_start_wait_time_s": "300", **extra}

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self)))

    @classmethod
    def load(cls, path: str | Path) -> "Cluster":
        data = json.loads(Path(path).read_text())
        return cls(switch=data["switch"], root=data["root"], python=data["python"],
                   hosts=[Host(**h) for h in data["hosts"]])

    # -- network -----------------------------------------------------------------------------------

    def create(self) -> None:
        os.makedirs(self.root, exist_ok=True)
        Path(self.root, "auth_token").write_text(secrets.token_hex(32))
        sh("ip", "netns", "add", self.switch)
        sh("ip", "netns", "exec", self.switch, "ip", "link", "add", "br0", "type", "bridge")
        sh("ip", "netns", "exec", self.switch, "ip", "link", "set", "br0", "up")
        for host in self.hosts:
            sh("ip", "netns", "add", host.name)
            host.run("ip", "link", "set", "lo", "up")  # Ray's processes also talk over loopback
            # created in the host's namespace (no name can clash with the machine's interfaces),
            # then one end moves to the switch
            host.run("ip", "link", "add", host.link, "type", "veth", "peer", "name", host.link + "b")
            host.run("ip", "link", "set", host.link + "b", "netns", self.switch)
            host.run("ip", "addr", "add", f"{host.ip}/24", "dev", host.link)
            host.run("ip", "link", "set", host.link, "up")
            # Ray finds a node's own address by routing towards a public one; this route is on-link
            # only (nothing answers beyond the bridge), so no packet ever leaves the namespaces
            host.run("ip", "route", "add", "default", "dev", host.link)
            sh("ip", "netns", "exec", self.switch, "ip", "link", "set", host.link + "b", "master", "br0")
            sh("ip", "netns", "exec", self.switch, "ip", "link", "set", host.link + "b", "up")

    def set_link(self, host: Host, up: bool) -> None:
        """Unplug (or plug back) a host's cable: its port on the bridge goes down."""
        sh("ip", "netns", "exec", self.switch, "ip", "link", "set", host.link + "b", "up" if up else "down")

    def set_partition(self, host: Host, cut: bool, open_port: int = S3_PORT) -> None:
        """Cut ``host`` off from the head host both ways except for TCP to and from ``open_port``
        on the head (the S3 server, which stands in for a storage service reached another way), or
        heal that. Each side drops what it sends to the other (an htb class whose queue holds
        nothing: this kernel has no tc drop action). One way only would let the head's messages
        through on connections already open: the far raylet would hear Ray declare its node dead
        and exit, taking the cut-off worker (the zombie the fence tests need) with it."""
        for side, peer, port_field in ((host, self.head, "dport"), (self.head, host, "sport")):
            side.run("tc", "qdisc", "del", "dev", side.link, "root", check=False)
            if not cut:
                continue
            to_peer = ["protocol", "ip", "u32", "match", "ip", "dst", f"{peer.ip}/32"]
            for args in (["qdisc", "add", "dev", side.link, "root", "handle", "1:", "htb", "default", "10"],
                         ["class", "add", "dev", side.link, "parent", "1:", "classid", "1:10", "htb", "rate", "10gbit"],
                         ["class", "add", "dev", side.link, "parent", "1:", "classid", "1:20", "htb", "rate", "10gbit"],
                         ["qdisc", "add", "dev", side.link, "parent", "1:20", "handle", "20:", "pfifo", "limit", "0"],
                         ["filter", "add", "dev", side.link, "parent", "1:", "prio", "1", *to_peer, "match", "ip",
                          "protocol", "6", "0xff", "match", "ip", port_field, str(open_port), "0xffff", "flowid", "1:10"],
                         ["filter", "add", "dev", side.link, "parent", "1:", "prio", "2", *to_peer, "flowid", "1:20"]):
                side.run("tc", *args)

    def set_delay(self, delay_ms: int) -> str:
        """``delay_ms`` on every host's outgoing traffic (a round trip gains 2x ``delay_ms``); 0
        removes it. By ``tc netem`` where the kernel has it, else by a userspace delayer (_delay.py)
        that an iptables NFQUEUE rule hands the link's packets to. Returns the way used."""
        way = self.delay_way()
        for host in self.hosts:
            if way == "netem":
                host.run("tc", "qdisc", "del", "dev", host.link, "root", check=False)
                if delay_ms:
                    host.run("tc", "qdisc", "add", "dev", host.link, "root", "netem", "delay", f"{delay_ms}ms")
                continue
            rule = ["OUTPUT", "-o", host.link, "-j", "NFQUEUE", "--queue-num", "0", "--queue-bypass"]
            pid_file = Path(self.root, f"delay-{host.name}.pid")
            host.run("iptables", "-D", *rule, check=False)  # first: held packets then go at once
            if pid_file.exists():
                os.kill(int(pid_file.read_text()), signal.SIGTERM)
                pid_file.unlink()
            if delay_ms:
                log = Path(self.root, f"delay-{host.name}.log")
                delayer = host.popen([self.python, str(Path(__file__).with_name("_delay.py")), str(delay_ms)], log)
                pid_file.write_text(str(delayer.pid))
                while "ready" not in log.read_text():  # bound to the queue: the rule may send packets
                    if delayer.poll() is not None:
                        raise RuntimeError(f"the NFQUEUE delayer on {host.name} failed:\n{log.read_text()}")
                    time.sleep(0.05)
                host.run("iptables", "-A", *rule)
        return way

    def delay_way(self) -> str:
        """How ``set_delay`` works here: "netem", else "nfqueue"; RuntimeError saying why neither can."""
        probe = self.head.run("tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms", check=False)
        self.head.run("tc", "qdisc", "del", "dev", "lo", "root", check=False)
        if not probe.returncode:
            return "netem"
        why = [f"`tc qdisc add ... netem` failed: {probe.stderr.strip()} (kernel without sch_netem)"]
        if not shutil.which("iptables"):
            why.append("no `iptables` for the NFQUEUE delayer (apt-get install iptables)")
        elif sh(self.python, "-c", "import fnfqueue", check=False).returncode:
            why.append("no fnfqueue for the NFQUEUE delayer (pip install fnfqueue)")
        else:
            rule = ["OUTPUT", "-o", "tkprobe0", "-j", "NFQUEUE", "--queue-num", "0", "--queue-bypass"]
            added = self.head.run("iptables", "-A", *rule, check=False)
            self.head.run("iptables", "-D", *rule, check=False)
            if not added.returncode:
                return "nfqueue"
            why.append(f"an iptables NFQUEUE rule failed: {added.stderr.strip()}")
        raise RuntimeError("; ".join(why))

    def round_trip_ms(self, host: Host, port: int = S3_PORT) -> float:
        """The median time of a TCP handshake (one round trip) from ``host`` to the head host."""
        probe = (f"import socket, statistics, time\nt = []\nfor _ in range(5):\n    s = time.perf_counter()\n"
                 f"    socket.create_connection(({self.head.ip!r}, {port}), timeout=5).close()\n"
                 f"    t.append(time.perf_counter() - s)\nprint(statistics.median(t) * 1000)")
        return float(host.run(self.python, "-c", probe).stdout)

    # -- Ray ---------------------------------------------------------------------------------------

    def start_ray(self, host: Host) -> None:
        """``ray start`` on ``host``: the head node on the first host, a worker node elsewhere."""
        ray = str(Path(self.python).parent / "ray")
        args = [ray, "start", f"--node-ip-address={host.ip}", f"--num-cpus={host.num_cpus}",
                f"--temp-dir={host.temp_dir}", "--disable-usage-stats"]
        if host is self.head:
            args += ["--head", f"--port={RAY_PORT}", "--include-dashboard=false",
                     f"--system-config={json.dumps(RAY_SYSTEM_CONFIG)}"]
        else:
            args += [f"--address={self.ray_address}"]
        done = host.run(*args, check=False, timeout=300, env=self.env())
        if done.returncode:
            raise RuntimeError(f"ray start on {host.name} failed:\n{done.stdout}\n{done.stderr}")

    def stop_host(self, host: Host) -> None:
        """Every process on ``host`` is killed at once, as when the machine loses power."""
        kill_namespace_processes(host.name)

    def destroy(self) -> None:
        for name in [h.name for h in self.hosts] + [self.switch]:
            remove_namespace(name)
        shutil.rmtree(self.root, ignore_errors=True)


def kill_namespace_processes(name: str) -> None:
    for _ in range(50):
        pids = [int(p) for p in sh("ip", "netns", "pids", name, check=False).stdout.split()]
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)


def remove_namespace(name: str) -> None:
    kill_namespace_processes(name)
    sh("ip", "netns", "del", name, check=False)


def remove_stale() -> None:
    """Namespaces (and their processes and temp dirs) left by a run whose process is gone."""
    listed = sh("ip", "netns", "list", check=False).stdout
    for name in re.findall(rf"^({PREFIX}(\d+)-\S+)", listed, flags=re.M):
        if not _alive(int(name[1])):
            remove_namespace(name[0])
    for root in Path("/tmp").glob(f"{PREFIX}*"):
        if (pid := root.name[len(PREFIX):]).isdigit() and not _alive(int(pid)):
            shutil.rmtree(root, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def plan(num_hosts: int, cpus: list[int]) -> Cluster:
    """The hosts' names, addresses and directories for this process (nothing created yet)."""
    tag = f"{PREFIX}{os.getpid()}"
    root = f"/tmp/{tag}"  # short: Ray's unix socket paths must fit in 107 characters
    hosts = [Host(name=f"{tag}-h{i}", ip=f"{SUBNET}.{i + 1}", link=f"eth{i}", temp_dir=f"{root}/h{i}",
                  num_cpus=cpus[i]) for i in range(num_hosts)]
    return Cluster(switch=f"{tag}-sw", root=root, hosts=hosts)


def missing_requirement() -> str | None:
    """Why multi-host tests cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root (creates network namespaces)"
    if not shutil.which("ip") or not shutil.which("tc"):
        return "needs iproute2's `ip` and `tc`"
    probe = f"{PREFIX}{os.getpid()}-probe"
    made = sh("ip", "netns", "add", probe, check=False)
    remove_namespace(probe)
    if made.returncode:
        return f"`ip netns add` failed: {made.stderr.strip()}"
    return None
