"""Real S3 servers for the test suite: moto's HTTP server and a throwaway one-node Ceph radosgw.

Fixtures (import them in conftest.py):

- ``moto_server`` (session): an :class:`S3Endpoint` for a ``moto.server.ThreadedMotoServer`` on 127.0.0.1.
- ``radosgw_server`` (session): a :class:`RadosGW` (an :class:`S3Endpoint` with ``stop()``/``start()``) backed by
  a one-monitor, one-memstore-OSD Ceph cluster in a temp dir; skipped when ``radosgw`` is not installed.
- ``s3_server``: parametrized over ``["moto", "radosgw"]``, so a test using it runs against both.

RGW 16 quirk: on PUT, a *quoted* ETag in ``If-Match`` never matches (412); send it unquoted (moto accepts both).
Conditional creates (``If-None-Match: *``) are atomic on RGW: of N racing writers one gets 200, the rest 412.
"""

from __future__ import annotations

import atexit
import ctypes
import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


def free_port() -> int:
    """A currently free TCP port on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclasses.dataclass(frozen=True)
class S3Endpoint:
    kind: str  # "moto" | "radosgw"
    url: str  # http://127.0.0.1:PORT
    access_key: str
    secret_key: str
    region: str = "us-east-1"

    def env(self) -> dict[str, str]:
        """Environment variables pointing the AWS SDKs (and ml8s) at this endpoint."""
        return {
            "AWS_ENDPOINT_URL": self.url,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_DEFAULT_REGION": self.region,
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def client(self, **config: Any) -> Any:
        """A boto3 S3 client for this endpoint (path-style addressing). Extra kwargs go to botocore Config."""
        import boto3
        from botocore.config import Config

        options: dict[str, Any] = {
            "s3": {"addressing_style": "path"},
            "retries": {"max_attempts": 2, "mode": "standard"},
        }
        options.update(config)
        cfg = Config(**options)
        return boto3.client(
            "s3",
            endpoint_url=self.url,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name=self.region,
            config=cfg,
        )

    def make_bucket(self, name: str | None = None) -> str:
        """Create a fresh, uniquely named bucket (a valid S3 name) and return its name."""
        if name is None:
            name = f"ml8s-{uuid.uuid4().hex[:20]}"
        self.client().create_bucket(Bucket=name)
        return name


# --------------------------------------------------------------------------------------------- moto


@pytest.fixture(scope="session")
def moto_server() -> Iterator[S3Endpoint]:
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield S3Endpoint(kind="moto", url=f"http://127.0.0.1:{port}", access_key="testing", secret_key="testing")
    finally:
        server.stop()


# --------------------------------------------------------------------------------------- radosgw

RADOSGW_SKIP = "radosgw not installed (apt-get install ceph-mon ceph-osd radosgw ceph-common): real-S3 cases skipped"
DIR_PREFIX = "ml8s-ceph-"
CEPH_BINARIES = ("ceph-mon", "ceph-osd", "radosgw", "radosgw-admin", "monmaptool", "ceph")
# With "auth ... = none" there is no session key for msgr2's "secure" mode: every daemon and client must use crc.
CRC_ARGS = ("--ms_mon_client_mode=crc", "--ms_client_mode=crc")


def missing_ceph_binaries() -> list[str]:
    return [b for b in CEPH_BINARIES if shutil.which(b) is None]


def _sweep_stale_dirs() -> None:
    """Remove cluster dirs left by a test process that was killed before it could clean up."""
    for path in Path(tempfile.gettempdir()).glob(f"{DIR_PREFIX}*"):
        try:
            owner = int((path / "owner.pid").read_text())
        except (OSError, ValueError):
            continue
        try:
            os.kill(owner, 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
        except OSError:
            pass


def _tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class CephCluster:
    """A throwaway one-node Ceph cluster (1 mon, 1 memstore OSD, radosgw) under a temp dir on 127.0.0.1.

    Every daemon runs in the foreground as a child process of this one; ``close()`` ends them all and removes the dir.
    """

    ACCESS_KEY = "ML8SACCESSKEY0000001"
    SECRET_KEY = "ml8s-secret-key-for-tests-only-000000000"
    UID = "ml8s"

    def __init__(self, ready_timeout: float = 60.0) -> None:
        missing = missing_ceph_binaries()
        if missing:
            raise FileNotFoundError(f"missing Ceph binaries: {', '.join(missing)}")
        self.ready_timeout = ready_timeout
        _sweep_stale_dirs()
        self.dir = Path(tempfile.mkdtemp(prefix=DIR_PREFIX))
        (self.dir / "owner.pid").write_text(str(os.getpid()))
        self.conf = self.dir / "ceph.conf"
        self.logs = self.dir / "log"
        self.mon_port = free_port()
        self.rgw_port = free_port()
        self.url = f"http://127.0.0.1:{self.rgw_port}"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._closed = False
        atexit.register(self.close)

    # ----------------------------------------------------------------------------------- plumbing

    def _write_conf(self) -> None:
        d = self.dir
        for sub in ("run", "log", "mon", "osd/ceph-0", "rgw", "tmp"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        self.conf.write_text(
            f"""[global]
fsid = {self.fsid}
mon initial members = a
mon host = v2:127.0.0.1:{self.mon_port}
public addr = 127.0.0.1
cluster addr = 127.0.0.1
ms bind msgr1 = false
ms bind ipv6 = false
auth cluster required = none
auth service required = none
auth client required = none
ms mon client mode = crc
ms client mode = crc
ms mon service mode = crc
ms service mode = crc
ms mon cluster mode = crc
ms cluster mode = crc
run dir = {d}/run
admin socket = {d}/run/$cluster-$name.asok
pid file = {d}/run/$cluster-$name.pid
log file = {d}/log/$cluster-$name.log
log to stderr = false
mon cluster log file = default={d}/log/$cluster.$channel.log cluster={d}/log/$cluster.log
err to stderr = true
crash dir = {d}/tmp
keyring = {d}/keyring
mon data = {d}/mon/$cluster-$id
osd data = {d}/osd/$cluster-$id
osd objectstore = memstore
memstore device bytes = 2147483648
osd pool default size = 1
osd pool default min size = 1
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
osd crush chooseleaf type = 0
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
mon max pg per osd = 1000
mon data avail warn = 1
mon data avail crit = 0
paxos propose interval = 0.01
paxos min wait = 0.001
rgw frontends = beast endpoint=127.0.0.1:{self.rgw_port} tcp_nodelay=1
rgw data = {d}/rgw
rgw enable usage log = false
rgw thread pool size = 64
rgw enable lc threads = false
rgw enable gc threads = false
rgw enable quota threads = false
"""
        )

    def _base(self) -> list[str]:
        return ["--cluster", "ceph", "--conf", str(self.conf), *CRC_ARGS]

    def _run(self, argv: list[str], timeout: float = 30.0) -> str:
        """Run a Ceph command line to completion; raise with its output on failure."""
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=self.dir)
        except subprocess.TimeoutExpired as exc:
            raise self._fail(f"{' '.join(argv)} timed out after {timeout:.0f}s") from exc
        if proc.returncode != 0:
            raise self._fail(f"{' '.join(argv)} -> rc={proc.returncode}\n{proc.stdout}\n{proc.stderr}")
        return proc.stdout

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        out = open(self.logs / f"{name}.out", "ab")
        try:
            proc = subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.dir,
                preexec_fn=_parent_death_signal(),
            )
        finally:
            out.close()  # the child holds its own copy
        self.procs[name] = proc
        return proc

    def _logs_tail(self) -> str:
        # daemons' stderr (*.out: the fatal errors) first, then their logs; the audit log is only noise
        paths = sorted(self.logs.glob("*.out")) + sorted(self.logs.glob("ceph-*.log"))
        return "\n".join(f"--- {path.name} ---\n{_tail(path)}" for path in paths)

    def _fail(self, what: str) -> RuntimeError:
        return RuntimeError(f"Ceph test cluster in {self.dir}: {what}\n{self._logs_tail()}")

    def _check_alive(self, *names: str) -> None:
        for name in names:
            proc = self.procs.get(name)
            if proc is not None and proc.poll() is not None:
                raise self._fail(f"{name} exited with rc={proc.returncode}")

    # ----------------------------------------------------------------------------------- lifecycle

    def start(self) -> None:
        """mkfs + start mon and OSD, create the S3 user, start radosgw; return once S3 answers."""
        self.fsid = str(uuid.uuid4())
        self._write_conf()
        monmap = self.dir / "monmap"
        self._run(
            [
                "monmaptool",
                "--create",
                "--fsid",
                self.fsid,
                "--addv",
                "a",
                f"[v2:127.0.0.1:{self.mon_port}]",
                str(monmap),
            ]
        )
        self._run(["ceph-mon", *self._base(), "--mkfs", "-i", "a", "--monmap", str(monmap)])
        self._spawn("mon", ["ceph-mon", *self._base(), "-f", "-i", "a"])

        osd_uuid = str(uuid.uuid4())
        self._run(["ceph", *self._base(), "--connect-timeout", "30", "osd", "new", osd_uuid, "0"])
        self._run(["ceph-osd", *self._base(), "-i", "0", "--mkfs", "--osd-uuid", osd_uuid])
        self._spawn("osd", ["ceph-osd", *self._base(), "-f", "-i", "0"])
        self._wait_osd_up()

        self._run(
            [
                "radosgw-admin",
                *self._base(),
                "user",
                "create",
                "--uid",
                self.UID,
                "--display-name",
                self.UID,
                "--access-key",
                self.ACCESS_KEY,
                "--secret",
                self.SECRET_KEY,
            ],
            timeout=self.ready_timeout,
        )
        self.start_rgw()

    def _wait_osd_up(self) -> None:
        # A client that sends an op before the OSD is up parks it as "homeless" until its 5 s objecter tick,
        # so wait for the OSD here: radosgw-admin then runs in ~0.3 s instead of ~5 s.
        deadline = time.monotonic() + self.ready_timeout
        while time.monotonic() < deadline:
            self._check_alive("mon", "osd")
            stat = json.loads(self._run(["ceph", *self._base(), "osd", "stat", "-f", "json"]))
            if stat.get("num_up_osds") == 1:
                return
            time.sleep(0.1)
        raise self._fail(f"osd.0 not up after {self.ready_timeout:.0f}s")

    def start_rgw(self) -> None:
        """(Re)start radosgw on the same port with the same data; return once ListBuckets succeeds."""
        proc = self.procs.get("rgw")
        if proc is not None and proc.poll() is None:
            return
        self._spawn("rgw", ["radosgw", *self._base(), "-f", "-n", "client.rgw.a"])
        self.wait_s3_ready()

    def wait_s3_ready(self) -> None:
        import boto3
        from botocore.config import Config

        s3 = boto3.client(
            "s3",
            endpoint_url=self.url,
            aws_access_key_id=self.ACCESS_KEY,
            aws_secret_access_key=self.SECRET_KEY,
            region_name="us-east-1",
            config=Config(retries={"max_attempts": 1}, connect_timeout=2, read_timeout=5),
        )
        deadline = time.monotonic() + self.ready_timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            self._check_alive("mon", "osd", "rgw")
            try:
                s3.list_buckets()
                return
            except Exception as exc:  # connection refused while starting, 5xx while pools come up
                last = exc
            time.sleep(0.2)
        raise self._fail(f"radosgw at {self.url} not ready after {self.ready_timeout:.0f}s (last error: {last!r})")

    def stop_rgw(self, timeout: float = 15.0) -> None:
        """SIGTERM radosgw (SIGKILL after ``timeout``) and wait for it to exit; mon and OSD keep running."""
        proc = self.procs.pop("rgw", None)
        if proc is not None:
            _terminate(proc, timeout)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for name in ("rgw", "osd", "mon"):
            proc = self.procs.pop(name, None)
            if proc is not None:
                _terminate(proc, 10.0)
        shutil.rmtree(self.dir, ignore_errors=True)
        atexit.unregister(self.close)


def _parent_death_signal() -> Any:
    """A preexec_fn asking Linux to SIGKILL the child if this process dies (e.g. pytest is SIGKILLed).

    PR_SET_PDEATHSIG fires when the *thread* that forked exits, so it is only used from the main thread.
    """
    if sys.platform != "linux" or threading.current_thread() is not threading.main_thread():
        return None
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
    except OSError:
        return None
    pr_set_pdeathsig = 1

    def preexec() -> None:
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)

    return preexec


def _terminate(proc: subprocess.Popen[bytes], timeout: float) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@dataclasses.dataclass(frozen=True)
class RadosGW(S3Endpoint):
    """The radosgw endpoint, plus ``stop()``/``start()`` of the radosgw process for fault tests."""

    cluster: CephCluster | None = dataclasses.field(default=None, compare=False, repr=False)

    def stop(self) -> None:
        """Stop the radosgw process only (S3 requests then fail to connect); the cluster's data stays."""
        assert self.cluster is not None
        self.cluster.stop_rgw()

    def start(self) -> None:
        """Start radosgw again on the same port with the same data; return once it serves S3."""
        assert self.cluster is not None
        self.cluster.start_rgw()


@pytest.fixture(scope="session")
def radosgw_server() -> Iterator[RadosGW]:
    missing = missing_ceph_binaries()
    if missing:
        pytest.skip(RADOSGW_SKIP if "radosgw" in missing else f"{RADOSGW_SKIP} (missing: {', '.join(missing)})")
    cluster = CephCluster()
    try:
        cluster.start()
        yield RadosGW(
            kind="radosgw",
            url=cluster.url,
            access_key=cluster.ACCESS_KEY,
            secret_key=cluster.SECRET_KEY,
            cluster=cluster,
        )
    finally:
        cluster.close()


# ------------------------------------------------------------------------------------------ both


@pytest.fixture(params=["moto", "radosgw"], ids=["moto", "radosgw"])
def s3_server(request: pytest.FixtureRequest) -> S3Endpoint:
    endpoint: S3Endpoint = request.getfixturevalue(f"{request.param}_server")
    return endpoint
