"""``ml8s.threads.in_order``: per-column work on two threads, with the results and the error of a loop."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from ml8s.threads import in_order


def test_results_come_back_in_the_items_order_whatever_finishes_first() -> None:
    names: set[str] = set()

    def slow_first(item: int) -> int:
        names.add(threading.current_thread().name)
        time.sleep(0.05 if item == 0 else 0)
        return item * item

    assert in_order(slow_first, list(range(6)), threads=2, name="test") == [0, 1, 4, 9, 16, 25]
    assert names == {"ml8s-test_0", "ml8s-test_1"}  # both threads worked
    assert in_order(slow_first, [3], threads=2, name="test") == [9]
    assert in_order(slow_first, [], threads=2, name="test") == []


@pytest.mark.parametrize("threads", [1, 2])
def test_the_first_failing_item_in_order_is_the_error_and_later_items_are_not_started(threads: int) -> None:
    """Item 1 fails late, item 2 fails at once: a loop raises item 1's error, and so does in_order. Items queued
    behind a failure are cancelled, not run."""
    started: list[int] = []
    release = threading.Event()

    def work(item: int) -> int:
        started.append(item)
        if item == 1:
            release.wait(5)
            raise ValueError("item 1")
        if item == 2:
            release.set()
            raise KeyError("item 2")
        time.sleep(0.02)
        return item

    with pytest.raises(ValueError, match="item 1"):
        in_order(work, list(range(50)), threads=threads, name="test")
    assert max(started) < 10, started  # the queue behind the failures was dropped


@pytest.mark.parametrize("threads", [1, 2])
def test_a_lead_item_starts_first_and_changes_neither_results_nor_error(threads: int) -> None:
    """``lead`` starts one item before the others (the data path types the target column first so that the split
    is drawn while the other columns are typed); what comes back is a loop's all the same."""
    started: list[int] = []
    lock = threading.Lock()

    def square(item: int) -> int:
        with lock:
            started.append(item)
        return item * item

    assert in_order(square, list(range(8)), threads=threads, name="test", lead=5) == [i * i for i in range(8)]
    assert started[0] == 5 if threads == 1 else 5 in started[:2]

    def fails(bad: set[int]) -> Callable[[int], int]:
        def work(item: int) -> int:
            with lock:
                started.append(item)
            if item in bad:
                raise ValueError(f"item {item}")
            return item

        return work

    # the lead fails, and so does an item before it: the loop's error is the earlier item's
    with pytest.raises(ValueError, match="item 2"):
        in_order(fails({2, 6}), list(range(8)), threads=threads, name="test", lead=6)
    # the lead fails first: items before it still run (one of them could be the loop's error), items after it do not
    started.clear()
    with pytest.raises(ValueError, match="item 3"):
        in_order(fails({3}), list(range(40)), threads=threads, name="test", lead=3)
    assert {0, 1, 2} <= set(started)
    if threads == 1:
        assert started == [3, 0, 1, 2]
    else:
        assert max(started) < 10, started


def test_thread_arrays_are_made_once_per_thread_and_name() -> None:
    import numpy as np

    from ml8s.threads import ThreadArrays

    arrays = ThreadArrays()
    first = arrays.get("rows", (4, 3), np.float32)
    assert arrays.get("rows", (4, 3), np.float32) is first and first.shape == (4, 3) and first.dtype == np.float32
    assert arrays.get("codes", 5, np.int32) is not first
    other: list[object] = []
    worker = threading.Thread(target=lambda: other.append(arrays.get("rows", (4, 3), np.float32)))
    worker.start()
    worker.join()
    assert other[0] is not first  # each thread its own


def test_lower_priority_changes_the_calling_thread_only_and_a_refusal_is_no_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import os

    from ml8s.threads import lower_priority

    before = os.getpriority(os.PRIO_PROCESS, 0)  # on Linux, the calling thread's niceness
    seen: list[int] = []

    def lowered() -> None:
        lower_priority(before + 5)
        seen.append(os.getpriority(os.PRIO_PROCESS, 0))

    worker = threading.Thread(target=lowered)
    worker.start()
    worker.join()
    assert seen == [before + 5] and os.getpriority(os.PRIO_PROCESS, 0) == before

    def refused(which: int, who: int, value: int) -> None:
        raise PermissionError("not allowed here")

    monkeypatch.setattr(os, "setpriority", refused)
    lower_priority(19)  # a system that refuses leaves the thread as it was
    assert os.getpriority(os.PRIO_PROCESS, 0) == before
