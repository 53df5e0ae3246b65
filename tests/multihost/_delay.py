"""``tc netem delay`` for kernels without netem: holds every packet of NFQUEUE queue 0 for DELAY_MS,
then lets it go (``python _delay.py DELAY_MS``, run in a host's namespace, whose iptables rule sends
the link's outgoing packets to the queue; _hosts.Cluster.set_delay starts it). Packets wait in a heap
of due times, so each is delayed once, however many are in flight. SIGTERM lets the held ones go."""

import heapq
import itertools
import signal
import sys
import threading
import time

import fnfqueue


def main(delay_s: float) -> None:
    connection = fnfqueue.Connection()
    queue = connection.bind(0)
    queue.set_mode(fnfqueue.MAX_PAYLOAD, fnfqueue.COPY_META)  # a verdict needs no payload
    held, order, changed, stop = [], itertools.count(), threading.Condition(), threading.Event()

    def receive():
        for packet in connection:
            with changed:
                heapq.heappush(held, (time.monotonic() + delay_s, next(order), packet))
                changed.notify()

    threading.Thread(target=receive, daemon=True).start()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print("ready", flush=True)
    with changed:
        while not stop.is_set():
            now = time.monotonic()
            while held and held[0][0] <= now:
                heapq.heappop(held)[2].accept()
            changed.wait(min(held[0][0] - now, 0.1) if held else 0.1)
        for *_, packet in held:
            packet.accept()


if __name__ == "__main__":
    main(float(sys.argv[1]) / 1000)
