"""The mask thread's queue: what a person asked for runs before background guesses."""

from __future__ import annotations

import threading

import pytest

from wherein.search.service.runner import LATER, NOW, PriorityRunner


@pytest.fixture()
def blocked():
    """A runner whose thread is busy until `release` is set, and the order tasks ran in."""
    runner = PriorityRunner("test")
    release, order = threading.Event(), []
    first = runner.submit(lambda: (release.wait(10), order.append("busy")))
    yield runner, release, order, first
    release.set()
    runner.close()


def test_asked_for_work_starts_before_queued_guesses(blocked):
    runner, release, order, first = blocked
    guesses = [runner.submit(lambda n=n: order.append(n), LATER) for n in ("g1", "g2")]
    asked = runner.submit(lambda: order.append("asked"), NOW)
    assert runner.pending(LATER) == 2
    release.set()
    for f in (first, asked, *guesses):
        f.result(timeout=10)
    assert order == ["busy", "asked", "g1", "g2"]


def test_a_new_round_of_guesses_replaces_the_queued_one(blocked):
    runner, release, order, first = blocked
    stale = runner.submit(lambda: order.append("stale"), LATER)
    assert runner.drop(LATER) == 1
    fresh = runner.submit(lambda: order.append("fresh"), LATER)
    release.set()
    fresh.result(timeout=10)
    assert stale.cancelled() and order == ["busy", "fresh"]


def test_an_error_reaches_the_caller_and_the_thread_goes_on():
    runner = PriorityRunner("test")
    try:
        with pytest.raises(ZeroDivisionError):
            runner.submit(lambda: 1 / 0).result(timeout=10)
        assert runner.submit(lambda: 42).result(timeout=10) == 42
    finally:
        runner.close()
