"""``ml8s chain log`` and ``ml8s chain tensorboard [--serve]``: what a chain holds, for people and for scripts.

``log`` with no chain named (no ``--chain``, CHAIN_NAME or MLFLOW_MODEL_NAME) and not exactly one chain under
the root lists the chains there instead of failing on a default name the user never chose.
``tensorboard --serve`` copies the logs of the versions on the chain (the commits that won; a losing racer's
logs were never uploaded) into a temporary directory and runs TensorBoard on it, on loopback unless told
otherwise; it stops with the command (Ctrl-C, SIGTERM) and takes its directory with it.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys

from ml8s.chain import ChainStore, ChainVersion, PromotionLog, chain_entries
from ml8s.cli.args import print_error, text_arg
from ml8s.errors import ConfigError
from ml8s.interrupts import signals_deferred
from ml8s.store import Store
from ml8s.text import shown, terminal_json


def add_tensorboard_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--serve", action="store_true", help="start TensorBoard on the logs (stops with Ctrl-C)")
    parser.add_argument(  # text_arg: a host with bytes that are not UTF-8 failed deep in socket (INTERNAL_ERROR)
        "--host", type=text_arg, default="127.0.0.1", help="with --serve: the address to bind (default 127.0.0.1)"
    )
    parser.add_argument("--port", type=int, default=6006, help="with --serve: the port (default 6006)")


def list_chains(store: Store, *, as_json: bool) -> int:
    """The chains under the root, one line each (or a JSON list), sorted by name; a chain whose head does not
    read is named on stderr (exit 1), the others still listed."""
    entries, broken = chain_entries(store)
    if as_json:
        _print([e.model_dump(mode="json") for e in entries])
    else:
        print(f"{'CHAIN':<24} {'HEAD':<8} {'SEMVER':<10} BLOCK")
        for e in entries:
            print(f"{e.chain:<24} v{e.head_counter:<7} {e.head_semver:<10} {e.head_block_hash[:12]}")
    for exc in broken:  # the root's path in these lines is the user's: escaped as every error is
        print_error(f"ml8s: {exc} (not listed; ml8s chain verify --chain NAME reports it)")
    if not entries and not broken and not as_json:
        print_error(f"ml8s: no chain under {store.uri('')}; `ml8s run` or `ml8s chain init` makes one")
    return 1 if broken else 0


def log_versions(chain: ChainStore, *, as_json: bool, summary: dict[int, dict[str, object]]) -> int:
    """The versions of one chain, newest first (with their drift report and promotion decision)."""
    from ml8s.cli.promote import decision_of
    from ml8s.lineage.drift import drift_lines  # pyarrow and numpy: only where a report is read

    versions = sorted(chain.list(), key=lambda v: v.counter, reverse=True)
    decisions = PromotionLog(chain).decisions()
    if as_json:
        _print(
            [
                {
                    **summary[v.counter],
                    "drift": drift_lines(chain, v),
                    "promotion": decision_of(decisions, v.block_hash) if v.counter else "",
                }
                for v in versions
            ]
        )
        return 0
    for v in versions:
        h = v.header
        print(
            f"v{v.counter:<6} {v.semver:<10} {v.block_hash[:12]}  {h.payload_kind.upper():<7} "
            f"{sum(f.size for f in h.files):>12} B  run {h.run_id or '-':<12}  {h.created_at}  "
            f"{decision_of(decisions, v.block_hash) if v.counter else ''}".rstrip()
        )
        for line in drift_lines(chain, v) or []:
            print(f"         drift: {shown(line)}")
    return 0


def tensorboard(args: argparse.Namespace, chain: ChainStore) -> int:
    """Print the log directories (``vN:URI``, TensorBoard's ``--logdir_spec``), or serve them with --serve."""
    wanted = set(args.counters)
    versions = [
        v for v in sorted(chain.list(), key=lambda v: v.counter) if v.counter and (not wanted or v.counter in wanted)
    ]
    missing = sorted(wanted - {v.counter for v in versions})
    if missing:
        raise ConfigError(
            f"chain {chain.name!r} has no version {missing[0]}; expected counters 1..{len(chain.list()) - 1}"
        )
    logdirs = {f"v{v.counter:010d}": chain.store.uri(chain.key(v.header.tensorboard_logdir)) for v in versions}
    if args.serve:
        return _serve(args, chain, versions)
    if args.json:
        _print(
            [
                {"counter": v.counter, "name": name, "logdir": logdirs[name]}
                for v, name in zip(versions, logdirs, strict=True)
            ]
        )
        return 0
    for name, uri in logdirs.items():
        print(f"{name}:{shown(uri)}")  # a root named with an escape or a bidi mark
    return 0


def _serve(args: argparse.Namespace, chain: ChainStore, versions: list[ChainVersion]) -> int:
    from ml8s.tempdirs import owned_tempdir

    if not 0 < args.port < 65536:
        raise ConfigError(f"--port {args.port}: expected a port number in 1..65535")
    _check_free(args.host, args.port)
    with owned_tempdir("ml8s-tensorboard-") as local:
        spec = []
        for v in versions:
            name = f"v{v.counter:010d}"
            prefix = chain.key(v.header.tensorboard_logdir) + "/"
            for info in chain.store.list(prefix):
                path = os.path.join(local, name, *info.key[len(prefix) :].split("/"))
                os.makedirs(os.path.dirname(path), exist_ok=True)
                chain.store.download(info.key, path)
            os.makedirs(os.path.join(local, name), exist_ok=True)
            spec.append(f"{name}:{os.path.join(local, name)}")
        command = [sys.executable, "-m", "tensorboard.main", "--logdir_spec", ",".join(spec)]
        command += ["--host", args.host, "--port", str(args.port)]
        url = f"http://{args.host}:{args.port}/"
        # TensorBoard's own start-up chatter goes to stderr; stdout keeps the one result.
        with contextlib.ExitStack() as stopping:
            with signals_deferred():  # a server started is a server the stack stops
                server = subprocess.Popen(command, stdout=sys.stderr, stderr=sys.stderr, preexec_fn=_die_with_parent)
                stopping.callback(_stop, server)
            if args.json:
                _print({"chain": chain.name, "url": url, "versions": [v.counter for v in versions], "pid": server.pid})
            else:
                print(url)
            sys.stdout.flush()
            print(
                f"ml8s: TensorBoard on chain {chain.name!r} ({len(versions)} version(s)) at {url}; Ctrl-C stops it",
                file=sys.stderr,
            )
            code = server.wait()
    if code != 0:
        raise ConfigError(
            f"TensorBoard exited with status {code} (port {args.port} in use?); expected it to serve until stopped"
        )
    return 0


def _check_free(host: str, port: int) -> None:
    """A named error before anything is printed when the address is taken (TensorBoard would only log it)."""
    try:
        with socket.create_server((host, port)):
            pass
    except OSError as exc:
        # a name that does not resolve is a gaierror: its own text, where os.strerror(-2) said "Unknown error -2"
        why = exc.strerror or (os.strerror(exc.errno) if exc.errno else str(exc))
        raise ConfigError(f"--host {host} --port {port}: cannot listen there ({why}); expected a free port") from exc


def _stop(server: subprocess.Popen[bytes]) -> None:
    if server.poll() is None:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def _die_with_parent() -> None:
    """In the child: the kernel ends TensorBoard if this command dies without stopping it (SIGKILL)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG


def _print(obj: object) -> None:
    print(terminal_json(obj))
