"""``ml8s`` commands in forked processes of one warm interpreter: each command is its own process, without
its own interpreter start and imports.

A small ``ml8s`` run on two cores costs about 8.5 CPU seconds, and about 5 of them are importing torch,
MLflow, sqlalchemy and ml8s itself, again for every one of the test session's 80 runs. Here one server per
test worker imports them once; each command is then a fork of it: its own process (pid, descriptors,
environment, working directory, exit status) that runs the ``ml8s`` console script's own entry point,
``ml8s.cli.main.console``, on the arguments, environment and working directory it is given, and ends as
that script ends (``end_process``: the atexit functions, then ``os._exit`` with the code). ``pyflyte``
commands (``forked_pyflyte``) are forks of the same server: a local ``pyflyte run`` of the training workflow
runs its tasks in its own process, so torch and MLflow are most of its start too. flytekit itself is not
preloaded: it reads HOME and the Flyte variables as it imports, so each fork imports it in its own
environment.

What a fork does not give, so the tests that need it start ``ml8s`` itself (``subprocess``):
- a fresh interpreter: a test of what a command imports (``sys.modules``), of what is read from the
  environment at import time (``TORCHINDUCTOR_DETERMINISTIC``), or of Python's start-up variables
  (``PYTHONIOENCODING``, ``PYTHONHASHSEED``);
- its own hash seed: every fork shares the server's, so a test of byte-identical results "in two processes"
  runs at least one of them as a fresh process (a set iterated in hash order would differ there);
- a process the test signals or races while it runs (``Popen``): the server answers only when the
  command has ended. (Python workers that race a store come from multiprocessing's fork server instead:
  tests/process_support.py.)
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

ML8S = str(Path(sys.executable).with_name("ml8s"))

# What the server imports before it forks: what ``ml8s run``, ``verify`` and the chain commands import
# anyway, the third-party ones being most of a small command's time.
_PRELOAD = (
    "torch",
    "mlflow",
    "mlflow.tracking",
    "mlflow.pyfunc",
    "mlflow.store.db.utils",
    "alembic.migration",
    "alembic.script",
    "sqlalchemy",
    "pandas",
    "pyarrow.parquet",
    "onnx",
    "ml8s.cli.main",
    "ml8s.pipeline.run",
    "ml8s.registry.registration",
    "ml8s.training.ranks",
    "ml8s.training.launch",
    "ml8s.pipeline.export",
    "ml8s.pipeline.features",
    "ml8s.pipeline.finalize",
    "ml8s.pipeline.register",
    "ml8s.pipeline.snapshot",
    "ml8s.pipeline.train",
    "ml8s.features.rules",
    "ml8s.inference.pyfunc",
    "ml8s.registry.alias",
    "ml8s.registry.promoted_alias",
    "mlflow.store.tracking.sqlalchemy_store",
    "mlflow.store.model_registry.sqlalchemy_store",
    "torch.onnx",
    "torch.utils.tensorboard",
    "boto3",
)

_SERVER = r"""
import contextlib, gc, importlib, json, os, select, socket, sys, tempfile, traceback
sys.path[0] = os.path.dirname(sys.argv[2])  # as the console script's: its bin directory
for name in json.loads(sys.argv[3]):
    importlib.import_module(name)
from ml8s.cli.main import console
from ml8s.process_exit import end_process
import sqlalchemy.orm
sqlalchemy.orm.configure_mappers()  # MLflow's ORM classes, configured on first use otherwise: in every command
gc.collect()
gc.freeze()  # as pre-fork servers do: a fork's collections leave the preloaded heap alone (no copy-on-write of it)
listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.bind(sys.argv[1])
listener.listen(64)
print("ready", flush=True)
parent = os.getppid()
waiting = {}  # pid -> the connection that waits for its exit status
while os.getppid() == parent:
    ready, _, _ = select.select([listener], [], [], 0.02)
    if ready:
        connection, _ = listener.accept()
        message, fds, _, _ = socket.recv_fds(connection, 1 << 20, 3)
        request = json.loads(message)
        sys.stdout.flush(); sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            try:  # never back into the loop: whatever happens, this process ends here
                listener.close(); connection.close()
                for target, fd in enumerate(fds):
                    os.dup2(fd, target)
                    os.close(fd)
                os.environ.clear()
                os.environ.update(request["env"])
                os.chdir(request["cwd"])
                # What the interpreter start would have made of this environment: PYTHONPATH's entries after
                # the script's directory, and the temporary directory (tempfile caches the first it finds).
                extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
                sys.path[1:1] = [os.path.abspath(p) for p in extra]
                tempfile.tempdir = None
                script = os.path.join(os.path.dirname(sys.argv[2]), request["script"])
                sys.argv = [script, *request["args"]]
                if request["script"] == "ml8s":
                    console()  # ends the process: end_process, os._exit
                # pyflyte's console script: flytekit imported here, after the command's environment is set
                # (it reads HOME and the Flyte variables as it imports); the script's sys.exit(main()), then
                # what the interpreter does at exit: wait for the threads that are not daemons, atexit.
                from flytekit.clis.sdk_in_container.pyflyte import main
                code = 0
                try:
                    main()
                except SystemExit as exc:
                    if isinstance(exc.code, int) or exc.code is None:
                        code = exc.code or 0
                    else:
                        print(exc.code, file=sys.stderr)
                        code = 1
                except BaseException:
                    traceback.print_exc()
                    code = 1
                import threading
                threading._shutdown()
                end_process(code)
            except BaseException:
                traceback.print_exc()
                sys.stderr.flush()
            finally:
                os._exit(70)
        for fd in fds:
            os.close(fd)
        connection.sendall(f"{pid}\n".encode())
        waiting[pid] = connection
    for pid in list(waiting):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            connection = waiting.pop(pid)
            with contextlib.suppress(OSError):
                connection.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
            connection.close()
"""


class _Server:
    def __init__(self, at_start: dict[str, str]) -> None:
        # the environment's temp folder, not tempfile.tempdir: a test that points that at its own (long) scratch
        # folder before the first fork would put the socket past AF_UNIX's 108-byte path limit
        self.directory = tempfile.mkdtemp(prefix="ml8s-forks-", dir=os.environ.get("TMPDIR") or "/tmp")
        self.address = os.path.join(self.directory, "socket")
        own = _read_at_start(os.environ)
        env = {k: v for k, v in os.environ.items() if k not in own} | at_start
        self.process = subprocess.Popen(
            [sys.executable, "-c", _SERVER, self.address, ML8S, json.dumps(_PRELOAD)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            env=env,
            text=True,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line == "ready\n", f"the fork server did not start: {line!r}"
        atexit.register(self.close)

    def close(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()
        self.process.wait()
        shutil.rmtree(self.directory, ignore_errors=True)


# One server per start-up environment (see _AT_START): a test that sets TORCHINDUCTOR_DETERMINISTIC in the
# worker's own environment (training in-process does) gets a second server, not a fresh process per command.
_servers: dict[tuple[tuple[str, str], ...], _Server] = {}
_MAX_SERVERS = 4


def _started(at_start: dict[str, str]) -> _Server | None:
    """The running server for this start-up environment, started if need be; None past ``_MAX_SERVERS``."""
    key = tuple(sorted(at_start.items()))
    server = _servers.get(key)
    if server is not None and server.process.poll() is None:
        return server
    if server is None and len(_servers) >= _MAX_SERVERS:
        return None
    _servers[key] = _Server(at_start)
    return _servers[key]


# Read when an interpreter starts or imports torch (the locale, the hash seed, stdio's encoding, OpenMP's
# threads, a preloaded library, the time zone): an environment that changes one of them needs a fresh process.
_AT_START = ("PYTHON", "LD_", "LC_", "LANG", "OMP_", "MKL_", "KMP_", "TORCH", "CUBLAS_", "CUDA_", "FAKETIME", "TZ")


def _read_at_start(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(_AT_START) and k != "PYTHONPATH"}


def forked_ml8s(
    args: Sequence[str],
    env: Mapping[str, str],
    cwd: Path | str | None = None,
    input: str | None = None,
    timeout: float = 300,
    fresh: bool = False,
    check: bool = False,
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run([ml8s, *args], env=env, cwd=cwd, input=input, capture_output=True, text=True,
    timeout=timeout, check=check)``, the command run in a fork of the warm server (module docstring), or in a
    fresh process when ``fresh``. Each environment's start-up variables (what an interpreter reads as it starts:
    ``_AT_START``) have their own server, up to ``_MAX_SERVERS``; past that, a fresh process."""
    return _forked("ml8s", args, env, cwd, input, timeout, fresh, check)


def forked_pyflyte(
    args: Sequence[str],
    env: Mapping[str, str],
    cwd: Path | str | None = None,
    timeout: float = 300,
    fresh: bool = False,
) -> subprocess.CompletedProcess[str]:
    """``pyflyte *args`` as ``forked_ml8s`` runs ``ml8s``: in a fork of the same warm server, which has torch,
    MLflow and ml8s imported but not flytekit (the fork imports it, once the command's environment is set:
    flytekit reads HOME and its variables as it imports). A local ``pyflyte run`` of the training workflow
    runs its tasks in that process, so the imports it saves are most of its start."""
    return _forked("pyflyte", args, env, cwd, None, timeout, fresh, False)


def _forked(
    script: str,
    args: Sequence[str],
    env: Mapping[str, str],
    cwd: Path | str | None,
    input: str | None,
    timeout: float,
    fresh: bool,
    check: bool,
) -> subprocess.CompletedProcess[str]:
    path = str(Path(ML8S).with_name(script))
    server = None if fresh else _started(_read_at_start(env))
    if server is None:
        return subprocess.run(
            [path, *args], env=env, cwd=cwd, input=input, capture_output=True, text=True, timeout=timeout, check=check
        )
    with (
        tempfile.TemporaryFile() as stdin,
        tempfile.TemporaryFile() as stdout,
        tempfile.TemporaryFile() as stderr,
        socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection,
    ):
        if input is not None:
            stdin.write(input.encode())
            stdin.seek(0)
        connection.connect(server.address)
        request = {"script": script, "args": list(args), "env": dict(env), "cwd": str(cwd or os.getcwd())}
        socket.send_fds(connection, [json.dumps(request).encode()], [stdin.fileno(), stdout.fileno(), stderr.fileno()])
        reply = connection.makefile("r")
        pid = int(reply.readline())
        connection.settimeout(timeout)
        try:
            code = int(reply.readline())
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            raise subprocess.TimeoutExpired([path, *args], timeout) from None
        stdout.seek(0)
        stderr.seek(0)
        done = subprocess.CompletedProcess([path, *args], code, _text(stdout.read()), _text(stderr.read()))
    if check:
        done.check_returncode()
    return done


def _text(data: bytes) -> str:
    """As ``subprocess.run(text=True)`` reads a stream: decoded, universal newlines."""
    return data.decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", "\n")
