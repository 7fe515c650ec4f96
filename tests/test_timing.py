"""rota.timing: cron and interval fire times, daylight saving, misfire plans, bad input.

Expected datetimes are written out by hand (checked against the 2026 tz rules: Berlin
03-29 02:00->03:00 and 10-25 03:00->02:00; New York 03-08 02:00->03:00 and 11-01
02:00->01:00; Lord Howe 04-05 02:00->01:30 and 10-04 02:00->02:30), never computed with the
code under test. Local results are compared as ISO strings, which pin both the wall time and
the UTC offset.
"""

from __future__ import annotations

import dataclasses
import itertools
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from cronsim import CronSim
from hypothesis import given, settings
from hypothesis import strategies as st

import rota.timing as timing
from rota.errors import ConfigurationError
from rota.timing import (
    UTC,
    CronTrigger,
    IntervalTrigger,
    Trigger,
    check_misfire,
    check_overlap,
    explain,
    make_trigger,
    next_fire_times,
    plan_ticks,
    resolve_zone,
)

BERLIN = "Europe/Berlin"
NEW_YORK = "America/New_York"
LORD_HOWE = "Australia/Lord_Howe"


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0, us: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, second, us, tzinfo=UTC)


def fires(cron: str, tz: str, after: datetime, count: int) -> list[str]:
    """Fire times as ISO strings; a naive `after` is read in `tz`."""
    return [t.isoformat() for t in next_fire_times(cron, tz=tz, after=after, count=count)]


# --- daylight saving: Europe/Berlin -----------------------------------------------------


def test_berlin_fixed_time_in_the_spring_gap_runs_at_the_jump() -> None:
    assert fires("30 2 * * *", BERLIN, datetime(2026, 3, 27, 12), 3) == [
        "2026-03-28T02:30:00+01:00",
        "2026-03-29T03:00:00+02:00",
        "2026-03-30T02:30:00+02:00",
    ]


def test_berlin_fixed_time_in_the_repeated_hour_runs_once_at_the_first() -> None:
    assert fires("30 2 * * *", BERLIN, datetime(2026, 10, 24, 12), 2) == [
        "2026-10-25T02:30:00+02:00",
        "2026-10-26T02:30:00+01:00",
    ]


def test_berlin_fixed_times_outside_the_windows_are_unaffected() -> None:
    assert fires("30 1 * * *", BERLIN, datetime(2026, 3, 28, 12), 2) == [
        "2026-03-29T01:30:00+01:00",
        "2026-03-30T01:30:00+02:00",
    ]
    assert fires("30 3 * * *", BERLIN, datetime(2026, 3, 28, 12), 1) == ["2026-03-29T03:30:00+02:00"]
    assert fires("30 1 * * *", BERLIN, datetime(2026, 10, 24, 12), 2) == [
        "2026-10-25T01:30:00+02:00",
        "2026-10-26T01:30:00+01:00",
    ]
    assert fires("30 3 * * *", BERLIN, datetime(2026, 10, 24, 12), 1) == ["2026-10-25T03:30:00+01:00"]


def test_berlin_several_fixed_times_in_the_gap_run_once() -> None:
    assert fires("0,30 2 * * *", BERLIN, datetime(2026, 3, 28, 12), 2) == [
        "2026-03-29T03:00:00+02:00",
        "2026-03-30T02:00:00+02:00",
    ]
    # 02:00 moves to the jump, which is 03:00: one run for both.
    assert fires("0 2,3 * * *", BERLIN, datetime(2026, 3, 28, 12), 3) == [
        "2026-03-29T03:00:00+02:00",
        "2026-03-30T02:00:00+02:00",
        "2026-03-30T03:00:00+02:00",
    ]


def test_berlin_hourly_wildcard_follows_the_wall_clock() -> None:
    assert fires("30 * * * *", BERLIN, datetime(2026, 3, 29, 0, 0), 3) == [
        "2026-03-29T00:30:00+01:00",
        "2026-03-29T01:30:00+01:00",
        "2026-03-29T03:30:00+02:00",  # no 02:30 that day
    ]
    assert fires("30 * * * *", BERLIN, datetime(2026, 10, 25, 0, 0), 5) == [
        "2026-10-25T00:30:00+02:00",
        "2026-10-25T01:30:00+02:00",
        "2026-10-25T02:30:00+02:00",
        "2026-10-25T02:30:00+01:00",  # and again after the clocks go back
        "2026-10-25T03:30:00+01:00",
    ]


def test_berlin_quarter_hour_wildcard_across_both_changes() -> None:
    assert fires("*/15 * * * *", BERLIN, datetime(2026, 3, 29, 1, 30), 3) == [
        "2026-03-29T01:45:00+01:00",
        "2026-03-29T03:00:00+02:00",
        "2026-03-29T03:15:00+02:00",
    ]
    after = utc(2026, 10, 25, 0, 40)  # 02:40 CEST
    assert fires("*/15 * * * *", BERLIN, after, 6) == [
        "2026-10-25T02:45:00+02:00",
        "2026-10-25T02:00:00+01:00",
        "2026-10-25T02:15:00+01:00",
        "2026-10-25T02:30:00+01:00",
        "2026-10-25T02:45:00+01:00",
        "2026-10-25T03:00:00+01:00",
    ]


def test_wildcard_minute_with_a_fixed_hour_does_not_run_on_the_missing_hour() -> None:
    assert fires("*/15 2 * * *", BERLIN, datetime(2026, 3, 28, 2, 40), 2) == [
        "2026-03-28T02:45:00+01:00",
        "2026-03-30T02:00:00+02:00",
    ]


def test_fixed_time_restarted_inside_the_repeated_hour_does_not_run_again() -> None:
    trigger = make_trigger(cron="30 2 * * *", tz=BERLIN)
    # 02:15 CET, the second pass: 02:30 CEST already ran, 02:30 CET is the repeat.
    assert trigger.next_after(utc(2026, 10, 25, 1, 15)) == utc(2026, 10, 26, 1, 30)
    # 02:45 CEST, the first pass, after the run.
    assert trigger.next_after(utc(2026, 10, 25, 0, 45)) == utc(2026, 10, 26, 1, 30)
    # Just before the first pass.
    assert trigger.next_after(utc(2026, 10, 25, 0, 29)) == utc(2026, 10, 25, 0, 30)


def test_wall_clock_job_restarted_inside_the_repeated_hour() -> None:
    trigger = make_trigger(cron="30 * * * *", tz=BERLIN)
    # 02:45 CEST (first pass): the next wall 02:30 is the second one, 02:30 CET.
    assert trigger.next_after(utc(2026, 10, 25, 0, 45)) == utc(2026, 10, 25, 1, 30)
    # 02:15 CET (second pass): 02:30 CET is still ahead.
    assert trigger.next_after(utc(2026, 10, 25, 1, 15)) == utc(2026, 10, 25, 1, 30)
    # 02:30 CET itself: next is 03:30 CET.
    assert trigger.next_after(utc(2026, 10, 25, 1, 30)) == utc(2026, 10, 25, 2, 30)


# --- daylight saving: America/New_York --------------------------------------------------


def test_new_york_fixed_times() -> None:
    assert fires("30 2 * * *", NEW_YORK, datetime(2026, 3, 7, 12), 2) == [
        "2026-03-08T03:00:00-04:00",
        "2026-03-09T02:30:00-04:00",
    ]
    assert fires("0 2 * * *", NEW_YORK, datetime(2026, 3, 7, 12), 1) == ["2026-03-08T03:00:00-04:00"]
    assert fires("30 1 * * *", NEW_YORK, datetime(2026, 10, 31, 12), 2) == [
        "2026-11-01T01:30:00-04:00",
        "2026-11-02T01:30:00-05:00",
    ]
    # 02:00 on the fall-back day exists once (EST): outside the repeated 01:00-01:59.
    assert fires("0 2 * * *", NEW_YORK, datetime(2026, 10, 31, 12), 1) == ["2026-11-01T02:00:00-05:00"]


def test_new_york_wildcards_follow_the_wall_clock() -> None:
    assert fires("30 * * * *", NEW_YORK, datetime(2026, 11, 1, 0, 0), 4) == [
        "2026-11-01T00:30:00-04:00",
        "2026-11-01T01:30:00-04:00",
        "2026-11-01T01:30:00-05:00",
        "2026-11-01T02:30:00-05:00",
    ]
    assert fires("*/15 * * * *", NEW_YORK, datetime(2026, 3, 8, 1, 40), 2) == [
        "2026-03-08T01:45:00-05:00",
        "2026-03-08T03:00:00-04:00",
    ]


# --- daylight saving: Australia/Lord_Howe (30-minute shift) ------------------------------


def test_lord_howe_fixed_times() -> None:
    # Spring forward 02:00 -> 02:30: 02:00 and 02:15 do not exist, 02:45 does.
    assert fires("0 2 * * *", LORD_HOWE, datetime(2026, 10, 3, 12), 2) == [
        "2026-10-04T02:30:00+11:00",
        "2026-10-05T02:00:00+11:00",
    ]
    assert fires("15 2 * * *", LORD_HOWE, datetime(2026, 10, 3, 12), 1) == ["2026-10-04T02:30:00+11:00"]
    assert fires("45 2 * * *", LORD_HOWE, datetime(2026, 10, 3, 12), 1) == ["2026-10-04T02:45:00+11:00"]
    # Fall back 02:00 -> 01:30: 01:30-01:59 happen twice, 01:15 once.
    assert fires("45 1 * * *", LORD_HOWE, datetime(2026, 4, 4, 12), 2) == [
        "2026-04-05T01:45:00+11:00",
        "2026-04-06T01:45:00+10:30",
    ]
    assert fires("15 1 * * *", LORD_HOWE, datetime(2026, 4, 4, 12), 2) == [
        "2026-04-05T01:15:00+11:00",
        "2026-04-06T01:15:00+10:30",
    ]


def test_lord_howe_wildcards_follow_the_wall_clock() -> None:
    assert fires("*/15 * * * *", LORD_HOWE, datetime(2026, 4, 5, 1, 10), 6) == [
        "2026-04-05T01:15:00+11:00",
        "2026-04-05T01:30:00+11:00",
        "2026-04-05T01:45:00+11:00",
        "2026-04-05T01:30:00+10:30",
        "2026-04-05T01:45:00+10:30",
        "2026-04-05T02:00:00+10:30",
    ]
    assert fires("*/15 * * * *", LORD_HOWE, datetime(2026, 10, 4, 1, 40), 3) == [
        "2026-10-04T01:45:00+10:30",
        "2026-10-04T02:30:00+11:00",
        "2026-10-04T02:45:00+11:00",
    ]
    assert fires("30 * * * *", LORD_HOWE, datetime(2026, 10, 4, 0, 0), 4) == [
        "2026-10-04T00:30:00+10:30",
        "2026-10-04T01:30:00+10:30",
        "2026-10-04T02:30:00+11:00",
        "2026-10-04T03:30:00+11:00",
    ]


# --- explain: DST notes ----------------------------------------------------------------


def notes(cron: str, tz: str, after: datetime, count: int) -> list[str | None]:
    return [f.note for f in explain(cron, tz=tz, after=after, count=count)]


def test_explain_notes_a_fixed_time_moved_to_the_jump() -> None:
    assert notes("30 2 * * *", BERLIN, datetime(2026, 3, 28, 12), 2) == [
        "02:30 does not exist on 2026-03-29 in Europe/Berlin (clocks jump from 02:00 to 03:00); runs at 03:00 CEST",
        None,
    ]
    assert notes("0 2 * * *", LORD_HOWE, datetime(2026, 10, 3, 12), 1) == [
        "02:00 does not exist on 2026-10-04 in Australia/Lord_Howe (clocks jump from 02:00 to 02:30); runs at 02:30 +11"
    ]


def test_explain_notes_merged_fixed_times() -> None:
    assert notes("0,30 2 * * *", BERLIN, datetime(2026, 3, 28, 12), 1) == [
        "02:00 and 02:30 do not exist on 2026-03-29 in Europe/Berlin (clocks jump from 02:00 "
        "to 03:00); runs once, at 03:00 CEST"
    ]
    assert notes("0 2,3 * * *", BERLIN, datetime(2026, 3, 28, 12), 1) == [
        "02:00 does not exist on 2026-03-29 in Europe/Berlin (clocks jump from 02:00 to "
        "03:00); runs once, at 03:00 CEST, together with the 03:00 run"
    ]


def test_explain_notes_a_fixed_time_that_happens_twice() -> None:
    assert notes("30 2 * * *", BERLIN, datetime(2026, 10, 24, 12), 2) == [
        "02:30 happens twice on 2026-10-25 in Europe/Berlin (clocks go back at 03:00 CEST to "
        "02:00 CET); runs once, at the first (CEST)",
        None,
    ]
    assert notes("30 1 * * *", NEW_YORK, datetime(2026, 10, 31, 12), 1) == [
        "01:30 happens twice on 2026-11-01 in America/New_York (clocks go back at 02:00 EDT "
        "to 01:00 EST); runs once, at the first (EDT)"
    ]


def test_explain_notes_wall_clock_repeats_and_gaps() -> None:
    assert notes("30 * * * *", BERLIN, datetime(2026, 10, 25, 2, 0), 3) == [
        "02:30 happens twice on 2026-10-25 in Europe/Berlin (clocks go back at 03:00 CEST to "
        "02:00 CET); this schedule follows the wall clock, so it runs at both: this is the "
        "first (CEST)",
        "repeated hour: 02:30 again, now CET after CEST (clocks go back at 03:00 CEST to "
        "02:00 CET on 2026-10-25 in Europe/Berlin)",
        None,
    ]
    assert notes("*/15 * * * *", BERLIN, datetime(2026, 3, 29, 1, 40), 2) == [
        None,
        "02:00, 02:15, 02:30 and 02:45 do not exist on 2026-03-29 in Europe/Berlin (clocks "
        "jump from 02:00 to 03:00); this schedule follows the wall clock, so it does not run "
        "then",
    ]
    assert notes("* * * * *", BERLIN, datetime(2026, 3, 29, 1, 59), 1) == [
        "02:00 to 02:59 (60 scheduled times) do not exist on 2026-03-29 in Europe/Berlin "
        "(clocks jump from 02:00 to 03:00); this schedule follows the wall clock, so it does "
        "not run then"
    ]


def test_explain_names_a_half_hour_repeat() -> None:
    fired = explain("45 * * * *", tz=LORD_HOWE, after=datetime(2026, 4, 5, 1, 40), count=2)
    assert [f.local.isoformat() for f in fired] == [
        "2026-04-05T01:45:00+11:00",
        "2026-04-05T01:45:00+10:30",
    ]
    assert fired[1].note == (
        "repeated 30m of wall time: 01:45 again, now +1030 after +11 (clocks go back at 02:00 "
        "+11 to 01:30 +1030 on 2026-04-05 in Australia/Lord_Howe)"
    )
    assert fired[1].utc == utc(2026, 4, 4, 15, 15)


def test_explain_has_no_notes_on_ordinary_days() -> None:
    assert notes("30 2 * * *", BERLIN, datetime(2026, 6, 1), 5) == [None] * 5
    assert notes("*/15 * * * *", "UTC", datetime(2026, 3, 29, 1, 50), 5) == [None] * 5


# --- cron syntax: aliases, names, ranges, L / LW / # -------------------------------------


@pytest.mark.parametrize(
    ("alias", "after", "expected"),
    [
        ("@hourly", utc(2026, 3, 4, 12, 34), utc(2026, 3, 4, 13)),
        ("@daily", utc(2026, 3, 4, 12, 34), utc(2026, 3, 5)),
        ("@midnight", utc(2026, 3, 4, 12, 34), utc(2026, 3, 5)),
        ("@weekly", utc(2026, 3, 4, 12, 34), utc(2026, 3, 8)),  # Sunday
        ("@monthly", utc(2026, 3, 4, 12, 34), utc(2026, 4, 1)),
        ("@yearly", utc(2026, 3, 4, 12, 34), utc(2027, 1, 1)),
        ("@annually", utc(2026, 3, 4, 12, 34), utc(2027, 1, 1)),
        ("@DAILY", utc(2026, 3, 4, 12, 34), utc(2026, 3, 5)),
    ],
)
def test_aliases(alias: str, after: datetime, expected: datetime) -> None:
    assert make_trigger(cron=alias).next_after(after) == expected


def test_alias_trigger_keeps_the_expression_as_given() -> None:
    trigger = make_trigger(cron="@daily", tz=BERLIN)
    assert isinstance(trigger, CronTrigger)
    assert (trigger.cron, trigger.expanded, trigger.tz) == ("@daily", "0 0 * * *", BERLIN)
    assert trigger.description == "cron '@daily' (0 0 * * *) in Europe/Berlin"
    assert make_trigger(cron="30 2 * * *", tz=BERLIN).description == ("cron '30 2 * * *' in Europe/Berlin")


@pytest.mark.parametrize(
    ("cron", "after", "expected"),
    [
        # names, lower case too
        ("0 9 * * MON-FRI", utc(2026, 3, 7, 12), [utc(2026, 3, 9, 9), utc(2026, 3, 10, 9)]),
        ("0 9 * * sat,sun", utc(2026, 3, 4), [utc(2026, 3, 7, 9), utc(2026, 3, 8, 9)]),
        ("0 0 1 JAN,JUL *", utc(2026, 3, 1), [utc(2026, 7, 1), utc(2027, 1, 1)]),
        # ranges, steps, lists
        (
            "0-30/10 9-10 * * *",
            utc(2026, 3, 1),
            [utc(2026, 3, 1, 9, m) for m in (0, 10, 20, 30)] + [utc(2026, 3, 1, 10)],
        ),
        (
            "5,35 */6 * * *",
            utc(2026, 3, 1),
            [utc(2026, 3, 1, 0, 5), utc(2026, 3, 1, 0, 35), utc(2026, 3, 1, 6, 5)],
        ),
        # day-of-month and day-of-week both restricted: either matches (Debian cron)
        ("0 0 12 * FRI", utc(2026, 3, 1), [utc(2026, 3, 6), utc(2026, 3, 12), utc(2026, 3, 13)]),
        # L, LW, nth and last weekday
        ("0 0 L 2 *", utc(2026, 1, 1), [utc(2026, 2, 28), utc(2027, 2, 28), utc(2028, 2, 29)]),
        ("0 0 LW 5 *", utc(2026, 1, 1), [utc(2026, 5, 29)]),  # May 31 2026 is a Sunday
        ("0 0 * * 5L", utc(2026, 3, 1), [utc(2026, 3, 27)]),
        ("0 0 * * 5#2", utc(2026, 3, 1), [utc(2026, 3, 13)]),
        ("0 0 * * MON#2", utc(2026, 3, 1), [utc(2026, 3, 9)]),
        ("0 0 * * 7", utc(2026, 3, 1, 1), [utc(2026, 3, 8)]),  # 7 is Sunday too
    ],
)
def test_cron_syntax(cron: str, after: datetime, expected: list[datetime]) -> None:
    got = next_fire_times(cron, tz="UTC", after=after, count=len(expected))
    assert got == expected


def test_next_fire_times_reads_a_naive_after_in_the_zone_and_returns_local_times() -> None:
    got = next_fire_times("0 9 * * *", tz=BERLIN, after=datetime(2026, 3, 1, 8, 59), count=1)
    assert got[0].isoformat() == "2026-03-01T09:00:00+01:00"
    assert got[0].tzinfo == ZoneInfo(BERLIN)
    aware = next_fire_times("0 9 * * *", tz=BERLIN, after=utc(2026, 3, 1, 8, 59), count=1)
    assert aware[0].isoformat() == "2026-03-02T09:00:00+01:00"


def test_next_fire_times_defaults_to_now() -> None:
    before = datetime.now(UTC)
    got = next_fire_times("* * * * *", count=3)
    assert len(got) == 3
    assert before < got[0] <= before + timedelta(minutes=1)
    assert got[1] - got[0] == timedelta(minutes=1)


def test_cron_next_after_is_strictly_after_and_accepts_any_zone() -> None:
    trigger = make_trigger(cron="0 * * * *")
    assert trigger.next_after(utc(2026, 3, 1, 12)) == utc(2026, 3, 1, 13)
    assert trigger.next_after(utc(2026, 3, 1, 11, 59, 59, 999_999)) == utc(2026, 3, 1, 12)
    in_berlin = datetime(2026, 3, 1, 13, 0, tzinfo=ZoneInfo(BERLIN))  # 12:00 UTC
    got = trigger.next_after(in_berlin)
    assert got == utc(2026, 3, 1, 13)
    assert got.tzinfo is UTC


# --- intervals ---------------------------------------------------------------------------


def test_interval_ticks_are_anchored_on_the_epoch() -> None:
    five_min = make_trigger(every=timedelta(minutes=5))
    assert five_min.next_after(utc(2026, 3, 1, 12, 3, 10)) == utc(2026, 3, 1, 12, 5)
    assert five_min.next_after(utc(2026, 3, 1, 12, 5)) == utc(2026, 3, 1, 12, 10)
    # 2026-01-01T00:00:00Z is 1_767_225_600 s after the epoch, which is 8 mod 11.
    eleven = make_trigger(every=11)
    assert eleven.next_after(utc(2026, 1, 1)) == utc(2026, 1, 1, 0, 0, 3)
    assert eleven.next_after(timing.EPOCH) == utc(1970, 1, 1, 0, 0, 11)


def test_interval_keeps_microseconds_exact() -> None:
    tenth = make_trigger(every=0.1)
    tick = utc(2026, 3, 1)
    for _ in range(10):
        tick = tenth.next_after(tick)
    assert tick == utc(2026, 3, 1, 0, 0, 1)  # floats would have drifted
    micro = make_trigger(every=timedelta(microseconds=1))
    assert micro.next_after(utc(2026, 3, 1, 0, 0, 0, 41)) == utc(2026, 3, 1, 0, 0, 0, 42)
    odd = make_trigger(every=timedelta(microseconds=333_333))
    # 1_767_225_600_000_000 us = 5_301_682_101 * 333_333 + 227_367; next multiple: +105_966 us.
    assert odd.next_after(utc(2026, 1, 1)) == utc(2026, 1, 1, 0, 0, 0, 105_966)


def test_interval_is_elapsed_time_across_daylight_saving() -> None:
    hourly = make_trigger(every=timedelta(hours=1), tz=BERLIN)
    zone = ZoneInfo(BERLIN)
    fall = (datetime(2026, 10, 25, tzinfo=zone), datetime(2026, 10, 26, tzinfo=zone))
    spring = (datetime(2026, 3, 29, tzinfo=zone), datetime(2026, 3, 30, tzinfo=zone))
    assert _count(hourly, *fall) == 25
    assert _count(hourly, *spring) == 23


def _count(trigger: Trigger, start: datetime, end: datetime) -> int:
    """How many ticks fall in [start, end)."""
    ticks = trigger.ticks_after(start - timedelta(microseconds=1))
    return sum(1 for _ in itertools.takewhile(lambda tick: tick < end, ticks))


def test_interval_description_and_numbers() -> None:
    assert make_trigger(every=30).description == "every 30s"
    assert make_trigger(every=timedelta(minutes=90)).description == "every 1h 30m"
    assert make_trigger(every=0.25).description == "every 0.25s"
    assert make_trigger(every=timedelta(days=1)).description == "every 1d"
    assert make_trigger(every=300) == IntervalTrigger(every=timedelta(minutes=5))
    assert make_trigger(every=1.5) == IntervalTrigger(every=timedelta(seconds=1.5))


def test_triggers_are_immutable_and_hashable() -> None:
    a = CronTrigger(cron="0 3 * * *", tz=BERLIN)
    b = make_trigger(cron="0 3 * * *", tz=BERLIN)
    c = make_trigger(cron="0 3 * * *", tz="UTC")
    assert a == b and hash(a) == hash(b) and a != c
    assert len({a, b, c, make_trigger(every=5), make_trigger(every=5)}) == 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.cron = "0 4 * * *"  # type: ignore[misc]  # frozen on purpose
    assert make_trigger(cron="0 3 * * *").tz == "UTC"


# --- plan_ticks ------------------------------------------------------------------------

HOURLY = IntervalTrigger(every=timedelta(hours=1))
MINUTE = timedelta(seconds=60)


def test_plan_nothing_due() -> None:
    plan = plan_ticks(HOURLY, utc(2026, 3, 1, 13), utc(2026, 3, 1, 12), misfire="skip", grace=MINUTE)
    assert plan == timing.TickPlan(run=(), skipped=(), skipped_more=0, next_run_at=utc(2026, 3, 1, 13))


def test_plan_one_tick_on_time() -> None:
    plan = plan_ticks(HOURLY, utc(2026, 3, 1, 12), utc(2026, 3, 1, 12, 0, 5), misfire="skip", grace=MINUTE)
    assert plan.run == (utc(2026, 3, 1, 12),)
    assert plan.skipped == ()
    assert plan.next_run_at == utc(2026, 3, 1, 13)


LATE_NOW = utc(2026, 3, 1, 12, 3, 30)  # 10:00, 11:00 and 12:00 are all more than 60 s late


def test_plan_skip_records_missed_ticks_with_reasons() -> None:
    plan = plan_ticks(HOURLY, utc(2026, 3, 1, 10), LATE_NOW, misfire="skip", grace=MINUTE)
    assert plan.run == ()
    assert plan.skipped == (
        (utc(2026, 3, 1, 10), "missed by 2h 03m (misfire=skip, grace 60s)"),
        (utc(2026, 3, 1, 11), "missed by 1h 03m (misfire=skip, grace 60s)"),
        (utc(2026, 3, 1, 12), "missed by 3m 30s (misfire=skip, grace 60s)"),
    )
    assert (plan.skipped_more, plan.next_run_at) == (0, utc(2026, 3, 1, 13))


def test_plan_all_runs_every_missed_tick_oldest_first() -> None:
    plan = plan_ticks(HOURLY, utc(2026, 3, 1, 10), LATE_NOW, misfire="all", grace=MINUTE)
    assert plan.run == (utc(2026, 3, 1, 10), utc(2026, 3, 1, 11), utc(2026, 3, 1, 12))
    assert plan.skipped == ()
    assert plan.next_run_at == utc(2026, 3, 1, 13)


def test_plan_coalesce_runs_the_newest_missed_tick_once() -> None:
    plan = plan_ticks(HOURLY, utc(2026, 3, 1, 10), LATE_NOW, misfire="coalesce", grace=MINUTE)
    assert plan.run == (utc(2026, 3, 1, 12),)
    reason = "coalesced into the run for 2026-03-01T12:00:00+00:00"
    assert plan.skipped == ((utc(2026, 3, 1, 10), reason), (utc(2026, 3, 1, 11), reason))
    assert plan.next_run_at == utc(2026, 3, 1, 13)


def test_plan_coalesce_skips_all_missed_ticks_when_one_is_on_time() -> None:
    now = utc(2026, 3, 1, 12, 0, 30)
    plan = plan_ticks(HOURLY, utc(2026, 3, 1, 10), now, misfire="coalesce", grace=MINUTE)
    assert plan.run == (utc(2026, 3, 1, 12),)
    reason = "coalesced (misfire=coalesce): a later tick runs"
    assert plan.skipped == ((utc(2026, 3, 1, 10), reason), (utc(2026, 3, 1, 11), reason))


@pytest.mark.parametrize("misfire", ["skip", "coalesce", "all"])
def test_plan_grace_boundary_exactly_at_grace_is_on_time(misfire: str) -> None:
    tick = utc(2026, 3, 1, 12)
    at_grace = plan_ticks(HOURLY, tick, tick + MINUTE, misfire=misfire, grace=MINUTE)
    assert at_grace.run == (tick,) and at_grace.skipped == ()
    late = plan_ticks(HOURLY, tick, tick + MINUTE + timedelta(microseconds=1), misfire=misfire, grace=MINUTE)
    if misfire == "skip":
        assert late.run == () and [t for t, _ in late.skipped] == [tick]
    else:  # coalesce runs the only missed tick; all runs it anyway
        assert late.run == (tick,) and late.skipped == ()
    zero = plan_ticks(HOURLY, tick, tick, misfire="skip", grace=timedelta(0))
    assert zero.run == (tick,)


def test_plan_off_grid_first_tick_as_for_run_immediately() -> None:
    created = utc(2026, 3, 1, 12, 17, 23, 500)
    plan = plan_ticks(HOURLY, created, created + timedelta(seconds=1), misfire="skip", grace=MINUTE)
    assert plan.run == (created,)
    assert plan.next_run_at == utc(2026, 3, 1, 13)
    # Down since then: the off-grid tick is one of the missed ones.
    plan = plan_ticks(HOURLY, utc(2026, 3, 1, 9, 17), LATE_NOW, misfire="coalesce", grace=MINUTE)
    assert plan.run == (utc(2026, 3, 1, 12),)
    assert [t for t, _ in plan.skipped] == [
        utc(2026, 3, 1, 9, 17),
        utc(2026, 3, 1, 10),
        utc(2026, 3, 1, 11),
    ]


def test_plan_accepts_any_zone_and_returns_utc() -> None:
    zone = ZoneInfo(BERLIN)
    plan = plan_ticks(
        HOURLY,
        datetime(2026, 3, 1, 13, tzinfo=zone),  # 12:00 UTC
        datetime(2026, 3, 1, 13, 0, 5, tzinfo=zone),
        misfire="coalesce",
        grace=MINUTE,
    )
    assert plan.run == (utc(2026, 3, 1, 12),)
    assert plan.run[0].tzinfo is UTC and plan.next_run_at.tzinfo is UTC


def test_plan_cron_across_the_spring_gap() -> None:
    trigger = make_trigger(cron="30 2 * * *", tz=BERLIN)
    plan = plan_ticks(trigger, utc(2026, 3, 28, 1, 30), utc(2026, 3, 29, 1, 0, 10), misfire="all", grace=MINUTE)
    assert plan.run == (utc(2026, 3, 28, 1, 30), utc(2026, 3, 29, 1, 0))  # 03:00 CEST
    assert plan.next_run_at == utc(2026, 3, 30, 0, 30)


def test_plan_cron_counts_exactly_under_the_bound() -> None:
    trigger = make_trigger(cron="0 * * * *")
    # 73 due ticks, 03-01 00:00 .. 03-04 00:00; the last is 30 s late, so on time.
    plan = plan_ticks(trigger, utc(2026, 3, 1), utc(2026, 3, 4, 0, 0, 30), misfire="skip", grace=MINUTE, limit=10)
    assert plan.run == (utc(2026, 3, 4),)
    assert [t for t, _ in plan.skipped] == [utc(2026, 3, 1, h) for h in range(10)]
    assert (plan.skipped_more, plan.skipped_more_exact) == (62, True)
    assert plan.next_run_at == utc(2026, 3, 4, 1)


def test_plan_all_is_capped_and_resumes() -> None:
    every_second = IntervalTrigger(every=timedelta(seconds=1))
    start, now = utc(2025, 6, 1), utc(2026, 6, 1)
    plan = plan_ticks(every_second, start, now, misfire="all", grace=MINUTE, limit=1000)
    assert len(plan.run) == 1000
    assert plan.run[0] == start and plan.run[-1] == start + timedelta(seconds=999)
    assert plan.next_run_at == start + timedelta(seconds=1000)  # <= now: more to come
    again = plan_ticks(every_second, plan.next_run_at, now, misfire="all", grace=MINUTE)
    assert again.run[0] == start + timedelta(seconds=1000)


def test_plan_interval_counts_skipped_ticks_exactly() -> None:
    every_second = IntervalTrigger(every=timedelta(seconds=1))
    now = utc(2026, 6, 1)
    # 86_401 due ticks; the last 61 (now-60s..now) are on time; 86_340 missed.
    plan = plan_ticks(every_second, now - timedelta(days=1), now, misfire="skip", grace=MINUTE, limit=1000)
    assert len(plan.run) == 61 and plan.run[0] == now - MINUTE and plan.run[-1] == now
    assert len(plan.skipped) == 1000
    assert (plan.skipped_more, plan.skipped_more_exact) == (85_340, True)
    assert plan.next_run_at == now + timedelta(seconds=1)


def test_plan_interval_coalesce_with_nothing_on_time_counts_exactly() -> None:
    every_10s = IntervalTrigger(every=timedelta(seconds=10))
    first = utc(2026, 6, 1)
    now = first + timedelta(seconds=10_005)  # 1001 ticks due, none on time with grace 0
    plan = plan_ticks(every_10s, first, now, misfire="coalesce", grace=timedelta(0), limit=100)
    assert plan.run == (first + timedelta(seconds=10_000),)
    assert len(plan.skipped) == 100 and plan.skipped[-1][0] == first + timedelta(seconds=990)
    assert plan.skipped_more == 900  # 1001 - 100 listed - 1 run
    assert plan.next_run_at == first + timedelta(seconds=10_010)


@pytest.mark.parametrize("misfire", ["skip", "coalesce", "all"])
def test_plan_every_second_down_a_year_takes_bounded_steps(misfire: str, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = 0
    original = IntervalTrigger.next_after

    def counting(self: IntervalTrigger, after: datetime) -> datetime:
        nonlocal calls
        calls += 1
        return original(self, after)

    monkeypatch.setattr(IntervalTrigger, "next_after", counting)
    every_second = IntervalTrigger(every=timedelta(seconds=1))
    now = utc(2026, 6, 1)
    plan = plan_ticks(every_second, now - timedelta(days=365), now, misfire=misfire, grace=MINUTE, limit=1000)
    assert calls <= 2_100
    if misfire != "all":
        # 31_536_001 due, 61 on time, 31_535_940 missed.
        assert len(plan.skipped) + plan.skipped_more == 31_535_940
        assert plan.next_run_at == now + timedelta(seconds=1)


def test_plan_cron_down_for_long_stops_counting_at_a_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    steps = 0

    class CountingCronSim(CronSim):
        def __next__(self) -> datetime:
            nonlocal steps
            steps += 1
            return super().__next__()

    monkeypatch.setattr(timing.triggers, "CronSim", CountingCronSim)
    trigger = make_trigger(cron="* * * * *")
    now = utc(2026, 6, 1, 0, 0, 30)
    for misfire in ("skip", "coalesce"):
        steps = 0
        plan = plan_ticks(trigger, utc(2025, 6, 1), now, misfire=misfire, grace=MINUTE, limit=10)
        bound = timing.COUNT_BOUND_PER_LIMIT * 10
        assert steps < bound + 500  # counted up to the bound, not all 525_600 minutes
        assert len(plan.skipped) == 10
        assert plan.skipped_more >= bound and not plan.skipped_more_exact
        assert plan.run == (utc(2026, 6, 1),)  # 23:59 is 90 s late: missed
        assert plan.next_run_at == utc(2026, 6, 1, 0, 1)


def test_plan_cron_coalesce_past_the_bound_finds_the_newest_missed_tick() -> None:
    trigger = make_trigger(cron="* 3 * * *", tz=BERLIN)  # 03:00-03:59 CEST = 01:00-01:59Z
    plan = plan_ticks(trigger, utc(2025, 6, 1), utc(2026, 6, 1), misfire="coalesce", grace=MINUTE, limit=10)
    assert plan.run == (utc(2026, 5, 31, 1, 59),)
    assert not plan.skipped_more_exact
    assert plan.next_run_at == utc(2026, 6, 1, 1)


def test_plan_is_deterministic() -> None:
    args = (HOURLY, utc(2026, 3, 1, 10), LATE_NOW)
    assert plan_ticks(*args, misfire="skip", grace=MINUTE) == plan_ticks(*args, misfire="skip", grace=MINUTE)


def test_plan_rejects_naive_datetimes_and_bad_arguments() -> None:
    with pytest.raises(ValueError, match="next_run_at must be an aware datetime"):
        plan_ticks(HOURLY, datetime(2026, 3, 1), LATE_NOW, misfire="skip", grace=MINUTE)
    with pytest.raises(ValueError, match="now must be an aware datetime"):
        plan_ticks(HOURLY, LATE_NOW, datetime(2026, 3, 1), misfire="skip", grace=MINUTE)
    with pytest.raises(ValueError, match="after must be an aware datetime"):
        HOURLY.next_after(datetime(2026, 3, 1))
    with pytest.raises(ValueError, match="after must be an aware datetime"):
        make_trigger(cron="* * * * *").next_after(datetime(2026, 3, 1))
    with pytest.raises(ConfigurationError, match="unknown misfire policy 'sikp'"):
        plan_ticks(HOURLY, LATE_NOW, LATE_NOW, misfire="sikp", grace=MINUTE)
    with pytest.raises(ConfigurationError, match="grace must be a timedelta >= 0"):
        plan_ticks(HOURLY, LATE_NOW, LATE_NOW, misfire="skip", grace=-MINUTE)
    with pytest.raises(ValueError, match="limit must be a positive integer, got 0"):
        plan_ticks(HOURLY, LATE_NOW, LATE_NOW, misfire="skip", grace=MINUTE, limit=0)


# --- properties --------------------------------------------------------------------------

_zones = st.sampled_from(["UTC", BERLIN, NEW_YORK, LORD_HOWE])
_crons = st.sampled_from(["30 2 * * *", "*/15 * * * *", "30 * * * *", "0,45 1,2 * * *", "@hourly"])
_moments = st.integers(min_value=0, max_value=400 * 24 * 60).map(
    lambda minutes: utc(2026, 1, 1) + timedelta(minutes=minutes, seconds=7)
)


@settings(max_examples=60, deadline=None)
@given(cron=_crons, tz=_zones, after=_moments)
def test_property_cron_walk_equals_repeated_next_after(cron: str, tz: str, after: datetime) -> None:
    trigger = make_trigger(cron=cron, tz=tz)
    walked = trigger.ticks_after(after)
    tick = after
    for _ in range(6):
        expected = trigger.next_after(tick)
        assert next(walked) == expected and expected > tick
        tick = expected


@settings(max_examples=60, deadline=None)
@given(
    cron=st.sampled_from(["30 * * * *", "*/15 * * * *", "0 */2 * * *", "* 2 * * *", "@hourly"]),
    tz=st.sampled_from([BERLIN, NEW_YORK]),
    after=_moments,
)
def test_property_wall_clock_walk_agrees_with_cronsim_for_whole_hour_shifts(
    cron: str, tz: str, after: datetime
) -> None:
    # rota maps naive wall times itself (cronsim's aware walk is wrong for Lord Howe's
    # 30-minute shift); where every shift is a whole hour the two must agree.
    trigger = CronTrigger(cron=cron, tz=tz)
    theirs = CronSim(trigger.expanded, after.astimezone(ZoneInfo(tz)))
    ours = trigger.ticks_after(after)
    for _ in range(8):
        assert next(ours) == next(theirs).astimezone(UTC)


@settings(max_examples=100, deadline=None)
@given(
    every_s=st.integers(min_value=1, max_value=5000),
    first=st.integers(min_value=0, max_value=100_000),
    late=st.integers(min_value=0, max_value=100_000),
    grace_s=st.integers(min_value=0, max_value=3000),
    misfire=st.sampled_from(["skip", "coalesce", "all"]),
    limit=st.integers(min_value=1, max_value=20),
)
def test_property_plan_accounts_for_every_due_tick(
    every_s: int, first: int, late: int, grace_s: int, misfire: str, limit: int
) -> None:
    trigger = IntervalTrigger(every=timedelta(seconds=every_s))
    start = utc(2026, 1, 1) + timedelta(seconds=first)
    now = start + timedelta(seconds=late)
    plan = plan_ticks(trigger, start, now, misfire=misfire, grace=timedelta(seconds=grace_s), limit=limit)
    # The due ticks, counted by hand: start, then grid ticks after it up to now.
    grid = [t for t in _interval_ticks(every_s, start, now)]
    assert list(plan.run) == sorted(plan.run) and all(t <= now for t in plan.run)
    assert len(plan.run) <= limit and len(plan.skipped) <= limit
    capped = plan.next_run_at <= now
    if not capped:
        assert len(plan.run) + len(plan.skipped) + plan.skipped_more == len(grid)
        assert plan.next_run_at == trigger.next_after(now)
    else:
        assert plan.next_run_at == trigger.next_after(plan.run[-1])


def _interval_ticks(every_s: int, start: datetime, now: datetime) -> list[datetime]:
    epoch_s = int((start - timing.EPOCH).total_seconds())
    k = epoch_s // every_s + 1
    ticks = [start]
    while timing.EPOCH + timedelta(seconds=k * every_s) <= now:
        ticks.append(timing.EPOCH + timedelta(seconds=k * every_s))
        k += 1
    return ticks


# --- bad input ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cron", "message"),
    [
        (
            "61 * * * *",
            r"invalid cron expression '61 \* \* \* \*': bad minute field '61' \(valid: 0-59",
        ),
        ("0 24 * * *", r"bad hour field '24'"),
        ("0 0 * 13 *", r"bad month field '13'"),
        ("0 0 * * FUNDAY", r"bad day-of-week field 'FUNDAY'"),
        ("* * * *", r"'\* \* \* \*': it has 4 fields; use five fields: minute hour day-of-month"),
        ("", r"'': it has 0 fields"),
        ("*/5 * * * * *", r"'\*/5 \* \* \* \* \*': it has 6 fields.*every=timedelta"),
        ("@reboot", r"cron '@reboot' is not supported"),
        ("@dayly", r"unknown cron alias '@dayly' \(did you mean '@daily'\?\)"),
        ("0 0 30 2 *", r"'0 0 30 2 \*': it can never fire: day-of-month '30' never occurs"),
        ("0 0 31 4,6 *", r"'0 0 31 4,6 \*': it can never fire"),
        ("0 0 32 * *", r"bad day-of-month field '32'"),
    ],
)
def test_invalid_cron_is_refused_naming_the_expression(cron: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        make_trigger(cron=cron)


def test_invalid_cron_message_reminds_the_format() -> None:
    with pytest.raises(ConfigurationError) as caught:
        make_trigger(cron="61 * * * *")
    assert "five fields: minute hour day-of-month month day-of-week" in str(caught.value)
    assert "@hourly/@daily" in str(caught.value)


def test_cron_must_be_a_string() -> None:
    with pytest.raises(ConfigurationError, match=r"cron must be a string.*got 5"):
        make_trigger(cron=5)  # type: ignore[arg-type]


def test_unknown_zone_suggests_a_close_name() -> None:
    with pytest.raises(ConfigurationError) as caught:
        resolve_zone("Europe/Berln")
    assert str(caught.value) == (
        "unknown time zone 'Europe/Berln' (did you mean 'Europe/Berlin'?); "
        "use an IANA name such as 'UTC' or 'Europe/Berlin'"
    )
    with pytest.raises(ConfigurationError, match=r"'europe/berlin' \(did you mean 'Europe/Berlin'\?\)"):
        make_trigger(cron="0 3 * * *", tz="europe/berlin")
    with pytest.raises(ConfigurationError, match="unknown time zone 'Mars/Olympus_Mons'; use"):
        make_trigger(every=5, tz="Mars/Olympus_Mons")
    with pytest.raises(ConfigurationError, match=r"unknown time zone '\.\./etc/passwd'"):
        resolve_zone("../etc/passwd")
    with pytest.raises(ConfigurationError, match="unknown time zone ''"):
        next_fire_times("0 3 * * *", tz="")


def test_zones_resolve_and_are_cached() -> None:
    assert resolve_zone("UTC") is resolve_zone("UTC")
    assert resolve_zone(BERLIN).key == BERLIN


def test_unknown_policy_words() -> None:
    assert check_misfire("coalesce") == "coalesce"
    assert check_overlap("replace") == "replace"
    with pytest.raises(
        ConfigurationError,
        match=r"unknown misfire policy 'coalese' \(did you mean 'coalesce'\?\); valid values are 'all', 'coalesce', 'skip'",
    ):
        check_misfire("coalese")
    with pytest.raises(ConfigurationError, match=r"unknown overlap policy 'replce' \(did you mean 'replace'\?\)"):
        check_overlap("replce")
    with pytest.raises(ConfigurationError, match="unknown overlap policy 'parallel'"):
        check_overlap("parallel")


@pytest.mark.parametrize(
    ("every", "message"),
    [
        (0, r"every=0 seconds is not positive"),
        (-5, r"every=-5 seconds is not positive"),
        (-0.5, r"every=-0.5 seconds is not positive"),
        (timedelta(seconds=-5), r"every=-5 seconds is not positive"),
        (timedelta(0), r"every=0 seconds is not positive"),
        (True, r"every must be a timedelta or a number of seconds, got True \(bool\)"),
        ("5", r"got '5' \(str\)"),
        (float("nan"), r"every must be a finite number of seconds, got nan"),
        (float("inf"), r"every must be a finite number of seconds, got inf"),
    ],
)
def test_bad_every(every: object, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        make_trigger(every=every)  # type: ignore[arg-type]


def test_exactly_one_of_cron_and_every() -> None:
    with pytest.raises(ConfigurationError, match=r"exactly one of cron= .* or every= .*got both"):
        make_trigger(cron="* * * * *", every=5)
    with pytest.raises(ConfigurationError, match=r"exactly one of cron= .* or every= .*got neither"):
        make_trigger()


@pytest.mark.parametrize("count", [0, -1, True, 2.0])
def test_count_must_be_a_positive_integer(count: object) -> None:
    with pytest.raises(ConfigurationError, match=f"count must be a positive integer, got {count!r}"):
        next_fire_times("* * * * *", count=count)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="count must be a positive integer"):
        explain("* * * * *", count=count)  # type: ignore[arg-type]
