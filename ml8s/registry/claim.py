"""The registration claim (``ml8s_registry/claims/{full_config_hash}.json``) and who holds it.

A claim names its holder's process: host name, the kernel boot and pid namespace it runs in, pid and
the process's start time (``/proc/<pid>/stat`` field 22, clock ticks since boot). A waiter on the same
machine (same host, boot and pid namespace, so the pid means the same process) can then tell at once
that the holder is gone: no such pid, a zombie, or a pid reused by a process that started at another
time. Such a claim is taken over at once, by the same compare-and-swap as an expired one; a holder on
another machine (or one this process cannot judge) is waited for until its lease expires.
"""

from __future__ import annotations

import os
import socket
from functools import cache

from pydantic import BaseModel, ConfigDict, ValidationError

from ml8s.contract import layout
from ml8s.errors import NotFoundError
from ml8s.store import Store

_PROC = "/proc"
_START_TIME_FIELD = 22  # proc(5): starttime, the 22nd field of /proc/<pid>/stat


class HolderProcess(BaseModel):
    """The process holding a claim, as precisely as its machine tells."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    host: str
    boot_id: str  # "" where the kernel has no boot id (not Linux)
    pid_namespace: str  # "" where there are no pid namespaces
    pid: int
    start_ticks: int | None  # None where the start time cannot be read


class RegistryClaim(BaseModel):
    """Who may create MLflow entries for one hash, until when; ``done`` releases it.

    ``process`` is absent in claims written before holders were recorded (and in hand-made ones): such a
    holder is judged by its lease alone. ``taken_over_from`` says whose claim this one replaced before its
    lease expired, and why.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    holder: str
    generation: int
    lease_expires: float
    done: bool = False
    model_version: str = ""
    process: HolderProcess | None = None
    taken_over_from: str = ""


def this_process() -> HolderProcess:
    """The calling process, as a claim records it."""
    pid = os.getpid()
    return HolderProcess(
        host=socket.gethostname(),
        boot_id=_boot_id(),
        pid_namespace=_pid_namespace(),
        pid=pid,
        start_ticks=_stat(pid)[1],
    )


def gone_reason(holder: HolderProcess | None) -> str:
    """Why ``holder`` has certainly ended, or ``""`` when it may live (or runs on another machine).

    Only a holder on this machine is judged: same host name, and the same boot id and pid namespace,
    since a pid means nothing across reboots or containers.
    """
    if holder is None or holder.pid <= 0:
        return ""
    mine = this_process()
    same = (holder.host, holder.boot_id, holder.pid_namespace) == (mine.host, mine.boot_id, mine.pid_namespace)
    if not same:
        return ""
    found, ticks = _stat(holder.pid)
    if found is None:
        return _gone_without_proc(holder)
    if found in ("Z", "X"):
        return f"process {holder.pid} on {holder.host} has exited (state {found})"
    if holder.start_ticks is not None and ticks is not None and ticks != holder.start_ticks:
        return (
            f"process {holder.pid} on {holder.host} is another process now (started at tick {ticks}, "
            f"the holder at tick {holder.start_ticks})"
        )
    return ""


def read_claim(store: Store, key: str) -> tuple[RegistryClaim | None, str | None]:
    """The claim and its CAS token; an unreadable claim counts as expired (taken over by CAS)."""
    try:
        versioned = store.get_versioned(key, max_bytes=layout.RECORD_MAX_BYTES)
    except NotFoundError:
        return None, None
    try:
        return RegistryClaim.model_validate_json(versioned.data), versioned.token
    except ValidationError:
        return RegistryClaim(holder="<unreadable>", generation=0, lease_expires=0.0), versioned.token


def _gone_without_proc(holder: HolderProcess) -> str:
    """No readable ``/proc/<pid>/stat`` (no /proc, or one mounted ``hidepid``): ask the kernel (``kill(pid, 0)``)."""
    try:
        os.kill(holder.pid, 0)
    except ProcessLookupError:
        return f"process {holder.pid} on {holder.host} no longer exists"
    except OSError:
        return ""  # it exists under another user (EPERM), or the kernel cannot say
    return ""


def _stat(pid: int) -> tuple[str | None, int | None]:
    """(state, start time in ticks) from ``/proc/<pid>/stat``; (None, None) when there is no such file."""
    try:
        with open(f"{_PROC}/{pid}/stat", encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    except OSError:
        return None, None
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after the last ")".
    fields = text[text.rfind(")") + 1 :].split()
    index = _START_TIME_FIELD - 3  # fields counts from field 3 (state)
    if not fields:
        return None, None
    ticks = fields[index] if len(fields) > index else ""
    return fields[0], int(ticks) if ticks.isdigit() else None


@cache
def _boot_id() -> str:
    try:
        with open(f"{_PROC}/sys/kernel/random/boot_id", encoding="ascii") as handle:
            return handle.read().strip()
    except OSError:
        return ""


@cache
def _pid_namespace() -> str:
    try:
        return os.readlink(f"{_PROC}/self/ns/pid")
    except OSError:
        return ""
