"""One contender of the lock race: ``_contender.py STORAGE ROUNDS GO_FILE READY_FILE DONE_FILE``.

Once GO_FILE names a start time, tries to take the lock of run ``race<r>`` at start + r * 0.3 s,
for each round r, keeping what it wins. Prints one JSON line per round, then stays alive until
DONE_FILE exists: a winner that exited would leave a dead driver's lease, which a late contender
rightly takes over.
"""

import json
import os
import sys
import time

from trainkit._internal.storage.lock import RunLock
from trainkit.errors import RunLockedError
from trainkit._internal.storage.run_storage import RunStorage

if __name__ == "__main__":
    storage, rounds, go, ready, done = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
    open(ready, "w").close()
    while not os.path.exists(go) or not open(go).read():
        time.sleep(0.01)
    start = float(open(go).read())
    for r in range(rounds):
        run = RunStorage(storage, f"race{r}")
        run.preflight()  # as a driver does before it takes the lock
        time.sleep(max(0.0, start + r * 0.3 - time.time()))
        try:
            RunLock(run).acquire()
            outcome = {"won": True}
        except RunLockedError as exc:
            outcome = {"won": False, "error": f"RunLockedError: {exc}"}
        except Exception as exc:  # noqa: BLE001 - reported to the test
            outcome = {"won": False, "error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps({"round": r, "pid": os.getpid(), "t": time.time(), **outcome}), flush=True)
    deadline = time.monotonic() + 300
    while not os.path.exists(done) and time.monotonic() < deadline:
        time.sleep(0.05)
