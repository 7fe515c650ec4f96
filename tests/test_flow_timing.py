"""Jitter and backfill arithmetic (rota.timing.jitter): pure, no database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

import rota
from rota import timing
from rota.timing.jitter import jitter_boundary, stored_due

HOUR = timedelta(hours=1)
T0 = datetime(2030, 1, 1, tzinfo=UTC)
HOURLY = timing.make_trigger(cron="0 * * * *")


def test_the_offset_is_stable_in_range_and_depends_on_the_schedule_and_the_tick() -> None:
    spread = timedelta(seconds=30)
    ticks = [T0 + k * HOUR for k in range(2000)]
    offsets = [timing.jitter_offset(HOURLY, "nightly", t, spread) for t in ticks]
    assert offsets == [timing.jitter_offset(HOURLY, "nightly", t, spread) for t in ticks]  # every host agrees
    assert all(timedelta(0) <= o < spread for o in offsets)
    assert min(offsets) < timedelta(seconds=1) and max(offsets) > timedelta(seconds=29)  # spread over the range
    assert len(set(offsets)) > 1990
    others = [timing.jitter_offset(HOURLY, "weekly", t, spread) for t in ticks]
    assert sum(a == b for a, b in zip(offsets, others, strict=True)) < 5
    # the same instant written in another zone gets the same offset
    berlin = ticks[7].astimezone(ZoneInfo("Europe/Berlin"))
    assert timing.jitter_offset(HOURLY, "nightly", berlin, spread) == offsets[7]
    assert timing.jittered(HOURLY, "nightly", ticks[7], spread) == ticks[7] + offsets[7]


def test_the_offset_never_reaches_the_next_tick() -> None:
    uneven = timing.make_trigger(cron="0,1 * * * *")  # a 1-minute gap, then 59 minutes
    spread = timedelta(minutes=30)
    for k in range(300):
        tick = uneven.next_after(T0 + k * timedelta(minutes=7))
        due = timing.jittered(uneven, "s", tick, spread)
        assert tick <= due < uneven.next_after(tick)
    assert timing.jitter_offset(HOURLY, "s", T0, None) == timedelta(0)
    assert stored_due("s", T0, None, "0 * * * *", None, "UTC") == T0
    assert stored_due("s", T0, 30.0, "0 * * * *", None, "UTC") == timing.jittered(
        HOURLY, "s", T0, timedelta(seconds=30)
    )
    assert stored_due("s", T0, 30.0, "0 * * * *", None, "No/Such_Zone") == T0  # its worker reports the zone


def test_check_jitter_accepts_seconds_and_timedeltas_and_refuses_bad_values() -> None:
    every = timing.make_trigger(every=timedelta(minutes=1))
    assert timing.check_jitter(None) is None and timing.check_jitter(0) is None
    assert timing.check_jitter(1.5, every) == timedelta(seconds=1.5)
    assert timing.check_jitter(timedelta(days=2), HOURLY) == timedelta(days=2)  # cron: clamped per gap
    with pytest.raises(rota.ConfigurationError, match=r"jitter must be >= 0 .*got -5"):
        timing.check_jitter(-5)
    with pytest.raises(rota.ConfigurationError, match=r"jitter 1m 30s must be shorter than .*every=1m"):
        timing.check_jitter(90, every)
    with pytest.raises(rota.ConfigurationError, match="jitter must be a timedelta or seconds, got True"):
        timing.check_jitter(True)


def test_misfire_is_judged_from_the_due_time_of_a_jittered_tick() -> None:
    spread = timedelta(minutes=50)
    tick = T0 + 5 * HOUR
    offset = timing.jitter_offset(HOURLY, "s", tick, spread)
    assert offset > timedelta(minutes=2)  # (stable for this name and tick)
    grace = timedelta(seconds=60)
    now = tick + offset + timedelta(seconds=30)  # well past tick + grace, within due + grace
    plain = timing.plan_ticks(HOURLY, T0, now, misfire="skip", grace=grace)
    jittered = timing.plan_ticks(HOURLY, T0, now, misfire="skip", grace=grace, jitter=spread, seed="s")
    assert plain.run == () and len(plain.skipped) == 6
    assert jittered.run == (tick,) and [t for t, _ in jittered.skipped] == [T0 + k * HOUR for k in range(5)]
    late = tick + offset + timedelta(seconds=61)
    assert timing.plan_ticks(HOURLY, T0, late, misfire="skip", grace=grace, jitter=spread, seed="s").run == ()
    # the boundary moves only onto a tick whose due time is at or after it
    assert jitter_boundary(HOURLY, "s", T0, now - grace, spread) == tick
    assert jitter_boundary(HOURLY, "s", T0, late - grace, spread) == late - grace
    assert jitter_boundary(HOURLY, "s", T0, now - grace, None) == now - grace


def test_ticks_between_is_half_open_and_capped() -> None:
    assert timing.ticks_between(HOURLY, T0, T0 + 3 * HOUR, 10) == [T0, T0 + HOUR, T0 + 2 * HOUR]
    assert timing.ticks_between(HOURLY, T0 + timedelta(seconds=1), T0 + HOUR, 10) == []
    with pytest.raises(rota.ConfigurationError, match="more than 2 ticks of cron '0 \\* \\* \\* \\*'"):
        timing.ticks_between(HOURLY, T0, T0 + 3 * HOUR, 2)
    with pytest.raises(rota.ConfigurationError, match="must be after start"):
        timing.ticks_between(HOURLY, T0, T0 - HOUR, 2)


def test_explain_and_next_fire_times_show_the_offsets() -> None:
    fires = timing.explain("0 * * * *", after=T0, count=3, jitter=timedelta(seconds=30), name="nightly")
    assert [f.offset for f in fires] == [
        timing.jitter_offset(HOURLY, "nightly", f.utc, timedelta(seconds=30)) for f in fires
    ]
    assert [f.due for f in fires] == [f.utc + (f.offset or timedelta(0)) for f in fires]
    anonymous = timing.explain("0 * * * *", after=T0, count=3, jitter=30)
    assert [f.offset for f in anonymous] == [
        timing.jitter_offset(HOURLY, "0 * * * * UTC", f.utc, timedelta(seconds=30)) for f in anonymous
    ]
    assert rota.next_fire_times("0 * * * *", after=T0, count=3, jitter=30, name="nightly") == [f.due for f in fires]
    assert timing.explain("0 * * * *", after=T0, count=1)[0].offset is None
