"""The loop watchdog beats only while an `async def` handler is in flight: an idle worker's
loop and watchdog thread sleep (issue 20, W12), and a handler that blocks the loop is still
named, also when it blocks before the first beat."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import pytest

from rota.worker.loopwatch import LINGER, LoopWatch


async def _with_watch(watch: LoopWatch, body: object) -> None:
    runner = asyncio.create_task(watch.run(lambda name: f"label of {name}"))
    try:
        await asyncio.sleep(0)  # the watch starts and parks
        await body  # type: ignore[misc]
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)


def _watchdog_threads() -> int:
    return sum(t.name == "rota-loopwatch" and t.is_alive() for t in threading.enumerate())


def test_an_idle_watch_takes_no_beats_and_its_thread_ends_with_it() -> None:
    watch = LoopWatch(threshold=0.05, tick=0.01)

    async def idle() -> None:
        await asyncio.sleep(0.3)
        assert watch.beats == 0  # 30 beats at this tick if it beat while idle

    before = _watchdog_threads()
    asyncio.run(_with_watch(watch, idle()))
    deadline = time.monotonic() + 2
    while _watchdog_threads() > before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _watchdog_threads() <= before  # the parked thread saw the stop


def test_a_watched_handler_gets_beats_and_they_stop_when_it_ends() -> None:
    watch = LoopWatch(threshold=5.0, tick=0.01)  # no lag on a loaded machine counts as a block

    async def handler() -> None:
        with watch.watching():
            await asyncio.sleep(0.2)
        beats = watch.beats
        assert beats >= 5
        deadline = time.monotonic() + 5
        while watch._thread_armed.is_set() and time.monotonic() < deadline:  # LINGER beats, then none
            await asyncio.sleep(0.01)
        lingered = watch.beats
        assert lingered <= beats + LINGER + 2  # the beat in flight when it ended, LINGER more, the last look
        await asyncio.sleep(0.2)
        assert watch.beats == lingered
        assert watch.blocked == 0

    asyncio.run(_with_watch(watch, handler()))


@pytest.mark.parametrize("warm", [False, True], ids=["before-the-first-beat", "between-beats"])
def test_a_handler_that_blocks_the_loop_is_named(warm: bool, caplog: pytest.LogCaptureFixture) -> None:
    watch = LoopWatch(threshold=0.2, tick=0.02)

    async def blocker() -> None:
        with watch.watching():
            if warm:
                await asyncio.sleep(0.1)  # beats running
            time.sleep(0.5)  # the mistake
        await asyncio.sleep(0.1)  # the loop runs again: the watch reports

    async def handler() -> None:
        await asyncio.create_task(blocker(), name="rota-run-7")

    with caplog.at_level(logging.WARNING, logger="rota.worker"):
        asyncio.run(_with_watch(watch, handler()))
    assert watch.blocked == 1
    assert "the event loop was blocked for 0." in caplog.text
    assert "by label of rota-run-7" in caplog.text


def test_a_drain_of_short_handlers_arms_the_watch_once() -> None:
    """Handlers in flight one at a time, back to back: the watch stays armed between them
    (LINGER) instead of arming, and waking its thread, for each (8 % of an async no-op drain)."""
    watch = LoopWatch(threshold=5.0, tick=0.01)

    async def drain() -> None:
        for _ in range(200):
            with watch.watching():
                await asyncio.sleep(0)
            await asyncio.sleep(0.0005)
        assert watch.arms == 1, watch.arms

    asyncio.run(_with_watch(watch, drain()))


def test_a_block_while_the_watch_lingers_with_no_handler_is_not_blamed_on_a_handler(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Worker code that blocks the loop in the second the watch lingers after the last
    handler is not reported as an async def handler's block (it was not watched before)."""
    watch = LoopWatch(threshold=0.1, tick=0.01)

    async def scenario() -> None:
        with watch.watching():
            await asyncio.sleep(0.03)
        await asyncio.sleep(0.03)  # lingering, no handler in flight
        time.sleep(0.3)  # the worker's own code blocks the loop
        await asyncio.sleep(0.05)
        assert watch.blocked == 0

    asyncio.run(_with_watch(watch, scenario()))
    assert "blocked" not in caplog.text
