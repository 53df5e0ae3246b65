"""Run leases that trust neither clocks nor replies (issue 44 item 2).

The promise (docs/fault-tolerance-and-storage.md, "One driver per run"): a driver never loses its
own run to a lost answer, and a live driver never loses its run to a second one, whatever either
machine's wall clock says. On one host a driver is alive while its pid *with its start time*
exists; a lease of another host is dead only once the reader watched its heartbeat stand still for
``STALE_S`` on its own monotonic clock.
"""

import json
import socket
import subprocess
import sys
import textwrap
import threading
import time

import pyarrow.fs as pafs
import pytest

from trainkit._internal.storage import lock, stores
from trainkit._internal.storage.run_state import RunState
from trainkit._internal.storage.run_storage import RunStorage
from trainkit.errors import RunLockedError, TrainkitWarning
from trainkit.testing.faultfs import FaultyHandler


class ReplyDroppingProxy:
    """A TCP proxy on loopback in front of the S3 server that forwards every request, and for the
    first ``PUT .../.lock`` with ``If-None-Match`` drops the server's answer and closes the
    connection: the write landed, the client never hears so and retries."""

    def __init__(self, upstream: str):
        host, port = upstream.split(":")
        self.upstream = (host, int(port))
        self.listener = socket.create_server(("127.0.0.1", 0))  # bound first: the port is ours
        self.endpoint = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.dropped = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            drop = threading.Event()
            threading.Thread(target=self._requests, args=(client, server, drop), daemon=True).start()
            threading.Thread(target=self._answers, args=(server, client, drop), daemon=True).start()

    def _requests(self, client, server, drop) -> None:
        while data := _recv(client):
            head = data.split(b"\r\n\r\n", 1)[0].lower()
            if (not self.dropped and head.startswith(b"put ") and b"/.lock " in head.split(b"\r\n", 1)[0] + b" "
                    and b"if-none-match" in head):
                drop.set()
            server.sendall(data)
        server.close()

    def _answers(self, server, client, drop) -> None:
        while data := _recv(server):
            if drop.is_set() and not data.startswith(b"HTTP/1.1 100"):
                self.dropped += 1
                client.shutdown(socket.SHUT_RDWR)
                client.close()
                server.close()
                return
            client.sendall(data)
        client.close()

    def close(self) -> None:
        self.listener.close()


def _recv(sock) -> bytes:
    try:
        return sock.recv(65536)
    except OSError:
        return b""


def test_a_lease_put_whose_answer_was_lost_is_the_drivers_own(s3_server):
    pytest.importorskip("boto3")
    proxy = ReplyDroppingProxy(s3_server["endpoint"])
    try:
        uri = s3_server["uri"].replace(s3_server["endpoint"], proxy.endpoint)
        storage = RunStorage(uri, f"lost-reply-{time.monotonic_ns()}")
        storage.preflight()
        run_lock = lock.RunLock(storage)
        run_lock.acquire()  # was: RunLockedError "being run by another driver (pid <its own>)"
        try:
            assert proxy.dropped == 1
            assert lock._read_lease(storage)["token"] == run_lock.owner["token"]
        finally:
            run_lock.release()
    finally:
        proxy.close()


SECOND_DRIVER = textwrap.dedent("""
    import sys
    from trainkit._internal.storage.lock import RunLock
    from trainkit._internal.storage.run_storage import RunStorage
    from trainkit.errors import RunLockedError
    try:
        RunLock(RunStorage(sys.argv[1], sys.argv[2])).acquire()
    except RunLockedError as exc:
        print("refused:", exc)
    else:
        print("took over")
""")


def test_a_wall_clock_stepped_back_never_hands_a_live_run_to_a_driver_of_the_same_host(tmp_path):
    storage = RunStorage(str(tmp_path / "runs"), "stepped")
    storage.preflight()
    storage.write_json_atomic("run_state.json", RunState("stepped").to_json())
    run_lock = lock.RunLock(storage)
    run_lock.acquire()
    try:
        # this driver's clock steps back 2 h: every heartbeat it writes looks 2 h old
        lease = lock._read_lease(storage)
        storage.write_text(lock.LOCK, json.dumps({**lease, "heartbeat": lease["heartbeat"] - 7200}))
        second = subprocess.run([sys.executable, "-c", SECOND_DRIVER, str(tmp_path / "runs"), "stepped"],
                                capture_output=True, text=True, timeout=120)
        assert second.stdout.startswith("refused: run 'stepped' is being run by another driver"), second
        assert RunState.load(storage.fs, storage.run_path).status == "running"  # trainkit show: not "interrupted"
    finally:
        run_lock.release()


def _beating(storage: RunStorage, lease: dict, stop: threading.Event) -> None:
    """Another host's live driver whose wall clock is 2 h behind: it beats, every heartbeat old."""
    beat = 0
    while not stop.wait(0.1):
        beat += 1
        storage.write_text(lock.LOCK, json.dumps({**lease, "beat": beat, "heartbeat": time.time() - 7200}))


def test_another_hosts_lease_is_dead_only_once_its_heartbeat_stood_still_on_the_readers_clock(tmp_path, monkeypatch):
    monkeypatch.setattr(lock, "STALE_S", 5.0)  # 50 beats: a busy machine never stalls the beater that long
    monkeypatch.setattr(lock, "WATCH_S", 0.1)
    storage = RunStorage(str(tmp_path / "runs"), "far")
    storage.preflight()
    lease = {"host": "far-away", "boot": "another-boot", "pid": 1, "started": "1", "token": "ab" * 16,
             "heartbeat": time.time() - 7200}
    storage.write_text(lock.LOCK, json.dumps(lease))
    stop = threading.Event()
    beater = threading.Thread(target=_beating, args=(storage, lease, stop))
    beater.start()
    try:
        with pytest.warns(TrainkitWarning, match="watching its heartbeat"), \
                pytest.raises(RunLockedError, match="being run by another driver .host far-away"):
            lock.RunLock(storage).acquire()
    finally:
        stop.set()
        beater.join()
    assert lock.driver_alive(storage)  # one look cannot call it dead
    taker = lock.RunLock(storage)
    with pytest.warns(TrainkitWarning, match="watching its heartbeat"):
        taker.acquire()  # the heartbeat stands still now: taken over after the watch
    assert lock._read_lease(storage)["token"] == taker.owner["token"]
    taker.release()


def test_a_live_drivers_lease_reads_alive_while_it_is_being_renewed(tmp_path):
    """A heartbeat replaces the lease whole: a reader never sees it half-written (it took a live
    run over when a watch read the lease between the truncate and the write)."""
    storage = RunStorage(str(tmp_path / "runs"), "renewing")
    storage.preflight()
    run_lock = lock.RunLock(storage)
    run_lock.acquire()
    renewed = threading.Event()

    def renew() -> None:
        for _ in range(300):
            run_lock._renew()
        renewed.set()

    renewer = threading.Thread(target=renew)
    renewer.start()
    reads, torn = 0, 0
    try:
        while not renewed.is_set():
            reads += 1
            torn += lock._read_lease(storage) is None or not lock.driver_alive(storage)
    finally:
        renewer.join()
        run_lock.release()
    assert reads and torn == 0, f"{torn} of {reads} reads found no live lease"


class HeartbeatAtTakeover(FaultyHandler):
    """Local disk where the lease's owner beats once more whenever a takeover marker is created:
    the driver that watched its lease stand still wakes up just as another one takes the run over."""

    def __init__(self, lease_path: str, lease: dict):
        super().__init__([])
        self.lease_path, self.lease, self.beats = lease_path, lease, 0

    def __reduce__(self):
        return HeartbeatAtTakeover, (self.lease_path, self.lease)

    def open_output_stream(self, path, metadata):
        if lock.TAKEOVER in path:
            self.beats += 1
            with open(self.lease_path, "w") as f:
                f.write(json.dumps({**self.lease, "beat": self.beats}))
        return super().open_output_stream(path, metadata)


def test_a_lease_that_beat_again_after_its_watch_is_never_taken_over(tmp_path, monkeypatch):
    monkeypatch.setattr(lock, "STALE_S", 0.3)
    monkeypatch.setattr(lock, "WATCH_S", 0.1)
    monkeypatch.setattr(stores.ObjectStore, "_warned_not_exclusive", True)  # PyFileSystem's: not this test's
    root = tmp_path / "runs"
    lease = {"host": "far-away", "boot": "another-boot", "pid": 1, "started": "1", "token": "cd" * 16,
             "heartbeat": 0}
    handler = HeartbeatAtTakeover(str(root / "woke" / lock.LOCK), lease)
    storage = RunStorage(str(root), "woke", filesystem=pafs.PyFileSystem(handler))
    storage.preflight()
    storage.write_text(lock.LOCK, json.dumps(lease))
    with pytest.warns(TrainkitWarning, match="watching its heartbeat"), pytest.raises(RunLockedError):
        lock.RunLock(storage).acquire()
    assert handler.beats >= 1
    assert lock._read_lease(storage)["token"] == lease["token"]  # still the far driver's
