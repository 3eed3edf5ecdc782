"""``ml8s.threads.in_order``: per-column work on two threads, with the results and the error of a loop."""

from __future__ import annotations

import threading
import time

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
