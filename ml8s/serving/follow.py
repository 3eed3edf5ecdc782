"""``ml8s follow``'s loop: keep a ``ModelDirectory`` holding the version an ``InferenceClient`` serves."""

from __future__ import annotations

import time
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict, Field

from ml8s.chain import Anchor, ChainVersions, ReadTrust
from ml8s.errors import Ml8sError, NoSpaceError
from ml8s.serving.client import ClientConfig, InferenceClient
from ml8s.serving.directory import ModelDirectory
from ml8s.serving.served import ServedVersion
from ml8s.serving.version_files import served_files


class FollowOptions(BaseModel):
    """What ``ml8s follow`` was asked: the output directory, the mode, and when to stop."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    out: str
    pinned: int | None = Field(default=None, ge=1)
    once: bool = False
    # under a day, as --poll-seconds: time.sleep overflows past ~9.2e9 s, after the first version was published
    poll_interval_s: float = Field(default=5.0, gt=0, lt=86400)


def follow(
    chain: ChainVersions,
    options: FollowOptions,
    *,
    anchor: Anchor | None = None,
    trust: ReadTrust | None = None,
    report: Callable[[ServedVersion], None] = lambda _: None,
    warn: Callable[[str], None] = lambda _: None,
    sleep: Callable[[float], None] = time.sleep,
) -> ServedVersion | None:
    """Keep ``options.out`` current; returns (``--once`` or pinned) the version it holds.

    Pinned: publish that version and return. ``once``: refresh until the client serves the head it last
    polled, then return; a refused head (rollback, fork, a version that does not verify) is raised. Otherwise
    poll forever: a refused head, or a version that finds no room on disk (NoSpaceError: written again on the
    next poll), is reported through ``warn`` and the directory keeps the last good version; any other error
    writing the directory (``--out`` unusable) is raised.
    """
    directory = ModelDirectory(options.out, exclusive=True)
    try:
        return _follow(directory, chain, options, anchor, trust, report, warn, sleep)
    finally:
        directory.close()


def _follow(
    directory: ModelDirectory,
    chain: ChainVersions,
    options: FollowOptions,
    anchor: Anchor | None,
    trust: ReadTrust | None,
    report: Callable[[ServedVersion], None],
    warn: Callable[[str], None],
    sleep: Callable[[float], None],
) -> ServedVersion | None:
    config = ClientConfig(
        pinned=options.pinned, poll_interval_s=options.poll_interval_s, state_path=directory.state_path
    )
    client = InferenceClient(chain, config, anchor=anchor, trust=trust)
    said = ""  # the last refusal reported: a follower that keeps failing the same way says so once
    while True:
        problem = ""
        try:
            changed = client.refresh()
            served = client.served
            due = served is not None and (changed or directory.current() != served.info)
            # refused like a head that does not verify: a payload file the follower's own files would clobber
            files = served_files(served) if served is not None and due else None
        except Ml8sError as exc:
            if options.once or options.pinned is not None:
                raise
            held = directory.current()
            problem = (
                f"ml8s: chain {chain.name!r}: keeping {held}: {exc}"
                if held is not None
                else f"ml8s: chain {chain.name!r}: waiting for a version to serve ({exc.code}); polling every "
                f"{options.poll_interval_s:g} s"
            )
            changed, files = False, None
        served = client.served
        if served is not None and files is not None:
            try:
                directory.publish_files(served.info, files, warn)
            except NoSpaceError as exc:
                # A full disk heals when space is freed: the next poll finds current behind the client and
                # writes the version again (the client keeps it in memory meanwhile)
                if options.once or options.pinned is not None:
                    raise
                held = directory.current()
                problem = (
                    f"ml8s: chain {chain.name!r}: keeping {held if held is not None else 'nothing yet'}: {exc}; "
                    f"trying again every {options.poll_interval_s:g} s"
                )
            else:
                report(served.info)
        if problem and problem != said:
            warn(problem)
        said = problem
        if options.pinned is not None:
            return served.info if served is not None else None
        if options.once and not changed:
            return served.info if served is not None else None
        if not options.once:
            sleep(options.poll_interval_s)
