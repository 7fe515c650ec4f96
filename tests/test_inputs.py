"""Bad input is refused at enqueue or decoration with the argument's name (issue 14 item 5);
a damaged stored row does not break listings. Every store refuses the same."""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import rota
from rota.stores import open_store

from .conftest import WITH_MYSQL, store_url


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


def _task(app: rota.App) -> Any:
    return app.task(name="t")(lambda *a, **k: None)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"delay": 1e12}, r"delay 1000000000000.0 is too far ahead: runs must be due before 9999-01-01"),
        ({"delay": 1e300}, r"delay 1e\+300 is too far ahead"),
        ({"delay": timedelta(days=3_000_000)}, r"delay .* is too far ahead"),
        ({"run_at": datetime(9999, 6, 1, tzinfo=UTC)}, r"run_at 9999-06-01T00:00:00\+00:00 is too far ahead"),
        ({"key": "a\x00b"}, r"key 'a\\x00b' contains a NUL character"),
        ({"key": "a\ud800"}, r"key 'a\\ud800' contains a lone surrogate"),
        ({"queue": "bad queue!"}, r"invalid queue name 'bad queue!'.*pattern \\A\[A-Za-z0-9_\.:\\-\]\{1,100\}\\Z"),
        ({"queue": "q\x00"}, r"invalid queue name 'q\\x00'"),
    ],
)
def test_bad_enqueue_options_are_refused_naming_the_option(
    app: rota.App, options: dict[str, Any], message: str
) -> None:
    t = _task(app)
    with pytest.raises(rota.ConfigurationError, match=message):
        t.options(**options).enqueue()
    assert app.list_runs() == []


def test_a_backoff_past_a_year_is_refused() -> None:
    with pytest.raises(rota.ConfigurationError, match=r"backoff max must be a number of seconds from 0 to 31622400"):
        rota.Backoff(base=1, max=1e12)


def test_a_delay_short_of_the_limit_is_accepted_and_readable(app: rota.App) -> None:
    t = _task(app)
    handle = t.options(delay=timedelta(days=365 * 100)).enqueue()
    assert app.get_run(handle.id).scheduled_for.year >= 2100
    assert [r.id for r in app.list_runs()] == [handle.id]


def test_a_lone_surrogate_in_arguments_is_refused_naming_the_argument(app: rota.App) -> None:
    t = _task(app)
    with pytest.raises(rota.SerializationError, match=r"argument 2 of t\(\) 'x\\udc80' contains a lone surrogate"):
        t.enqueue("fine", "x\udc80")
    with pytest.raises(rota.SerializationError, match=r"argument 'data' of t\(\)\['k'\]\[0\] .* lone surrogate"):
        t.enqueue(data={"k": ["\ud800"]})
    with pytest.raises(rota.SerializationError, match=r"a key of argument 'data' of t\(\) .* lone surrogate"):
        t.enqueue(data={"\ud800": 1})
    t.enqueue("é ☃ 😀 \x00 nul is fine inside JSON")  # valid text, NUL escaped by JSON
    assert app.list_runs()[0].args == ["é ☃ 😀 \x00 nul is fine inside JSON"]


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("bad\x00name", r"schedule name 'bad\\x00name' contains a NUL"),
        ("b\udfffad", r"schedule name .* lone surrogate"),
    ],
)
def test_schedule_names_that_cannot_be_stored_are_refused(app: rota.App, name: str, message: str) -> None:
    _task(app)
    with pytest.raises(rota.ConfigurationError, match=message):
        app.add_schedule(name, "t", every=60)
    with pytest.raises(rota.ConfigurationError, match=message.replace("schedule name", "task name")):
        app.schedule(every=60, name=name)(lambda: None)  # the task it declares is checked first
    with pytest.raises(rota.ConfigurationError, match=message):
        app.get_schedule(name)
    with pytest.raises(rota.ConfigurationError, match=message):
        app.pause(name)


def test_lookups_by_names_that_cannot_be_stored_name_the_filter(app: rota.App) -> None:
    with pytest.raises(rota.ConfigurationError, match=r"task 'a\\x00' contains a NUL"):
        app.list_runs(task="a\x00")
    with pytest.raises(rota.ConfigurationError, match=r"queue 'q\\ud800' contains a lone surrogate"):
        app.list_runs(queue="q\ud800")
    with pytest.raises(rota.ConfigurationError, match=r"schedule 'x\\x00' contains a NUL"):
        app.list_runs(schedule="x\x00")
    with pytest.raises(rota.RunNotFound, match="from 1 to 9223372036854775807"):
        app.get_run(9223372036854775808)


@pytest.mark.parametrize(
    ("every", "message"),
    [
        (0.001, r"every=0.001 seconds is out of range: a schedule fires at most once a second"),
        (0.5, r"every=0.5 seconds is out of range"),
        (1e12, r"every=1e\+12 seconds is out of range"),
        (timedelta(days=4000), r"every=3.456e\+08 seconds is out of range"),
    ],
)
def test_every_outside_the_documented_range_is_refused(app: rota.App, every: Any, message: str) -> None:
    _task(app)
    with pytest.raises(rota.ConfigurationError, match=message):
        app.add_schedule("s", "t", every=every)
    with pytest.raises(rota.ConfigurationError, match=message):
        app.schedule(every=every, name="s")(lambda: None)


def test_every_at_the_limits_is_accepted(app: rota.App) -> None:
    _task(app)
    assert app.add_schedule("fast", "t", every=1).every == timedelta(seconds=1)
    assert app.add_schedule("rare", "t", every=timedelta(days=3650)).next_run_at is not None


@pytest.mark.parametrize("tz", ["localtime", "posixrules", "Factory", "posix/Europe/Berlin", "/etc/localtime"])
def test_zone_names_that_are_not_iana_zones_are_refused(app: rota.App, tz: str) -> None:
    _task(app)
    with pytest.raises(rota.ConfigurationError, match=rf"time zone {tz!r} is not an IANA zone name"):
        app.add_schedule("s", "t", cron="0 3 * * *", tz=tz)


def test_a_worker_refuses_a_queue_name_outside_the_pattern(app: rota.App) -> None:
    with pytest.raises(rota.ConfigurationError, match=r"invalid queue name 'bad queue!'.*pattern"):
        app.worker(queues=["default", "bad queue!"])


@pytest.mark.parametrize("value", ["abc", "-1", "nan", "1e9"])
def test_a_bad_sqlite_busy_timeout_is_refused(tmp_path: Any, value: str) -> None:
    with pytest.raises(rota.ConfigurationError, match=rf"invalid busy_timeout='{value}'.*a number from 0 to 3600"):
        open_store(f"sqlite:///{tmp_path}/x.db?busy_timeout={value}")
    assert open_store(f"sqlite:///{tmp_path}/x.db?busy_timeout=2.5").busy_timeout == 2.5  # type: ignore[attr-defined]


def test_a_redis_locks_url_with_a_database_that_does_not_exist_is_refused(redis_url: str, tmp_path: Any) -> None:
    base = redis_url.rsplit("/", 1)[0]
    with pytest.raises(rota.ConfigurationError, match=r"invalid database 'abc' in the Redis locks URL"):
        rota.App(f"sqlite:///{tmp_path}/x.db", locks_url=f"{base}/abc")
    app = rota.App(f"sqlite:///{tmp_path}/x.db", locks_url=f"{base}/99")
    try:
        with pytest.raises(
            rota.ConfigurationError, match=r"names database 99, which does not exist: this server has databases 0 to"
        ):
            app.try_lock("x")
    finally:
        app.close()


# -- a damaged row -------------------------------------------------------------------------


def _damage(app: rota.App, run_id: str, **columns: str) -> None:
    store: Any = app.store
    sets = ", ".join(f"{c} = {store._p(c)}" for c in columns)
    with store._tx() as s:
        s.q_text(f"UPDATE rota_runs SET {sets} WHERE id = {int(run_id)}", **columns)


def test_a_row_with_bad_json_is_listed_as_corrupt_and_the_rest_still_list(app: rota.App) -> None:
    t = _task(app)
    good, bad, worse = t.enqueue(1), t.enqueue(2), t.enqueue(3)
    _damage(app, bad.id, args="[1, 2")
    _damage(app, worse.id, kwargs="{oops", result="not json", error="{")
    runs = {r.id: r for r in app.list_runs()}
    assert set(runs) == {good.id, bad.id, worse.id}
    assert runs[good.id].corrupt == () and runs[good.id].args == [1]
    assert runs[bad.id].corrupt == ("args",) and runs[bad.id].args == []
    assert runs[worse.id].corrupt == ("kwargs", "result", "error")
    data = app.get_run(bad.id).to_json()
    assert data["corrupt"] == "stored args not valid JSON" and data["args"] is None
    assert "corrupt" not in app.get_run(good.id).to_json()
    assert app.cancel(bad.id).status == "cancelled"
    with pytest.raises(
        rota.ConfigurationError, match=rf"run {bad.id} cannot be retried: its stored arguments are not valid JSON"
    ):
        app.retry(bad.id)


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_worker_fails_a_run_with_bad_stored_json_once_without_retrying(app: rota.App, kind: str) -> None:
    import time

    from .conftest import start_worker

    calls: list[Any] = []

    async def async_handler(*a: Any) -> None:
        calls.append(a)

    handler = async_handler if kind == "async" else (lambda *a: calls.append(a))
    t = app.task(name="t", retries=3)(handler)
    bad = t.enqueue(1)
    _damage(app, bad.id, args="[1,")
    good = t.enqueue(2)
    start_worker(app)
    run = bad.wait(timeout=10)
    assert run.status == "failed" and run.attempt == 1  # not retried
    assert run.error is not None and run.error["type"] == "DamagedRow"  # rota.quarantine (issue 41)
    assert run.error["message"].startswith("damaged row: stored arguments are not valid JSON")
    assert good.wait(timeout=10).status == "succeeded"
    time.sleep(0.1)
    assert calls == [(2,)]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("ConnectionError", r"got 'ConnectionError': pass the class itself, e\.g\. retry_on=\(ConnectionError,\)"),
        (5, r"retry_on must be an exception class or a tuple of them, got 5"),
        ((ValueError, "KeyError"), r"retry_on must list exception classes, got 'KeyError'"),
    ],
)
def test_retry_on_is_refused_whole_with_its_value(app: rota.App, value: Any, message: str) -> None:
    """A name given as a string was refused letter by letter ("got 'C'")."""
    with pytest.raises(rota.ConfigurationError, match=message):
        app.task(name="t", retry_on=value)(lambda: None)


def test_retry_on_takes_one_exception_class_as_well_as_a_tuple(app: rota.App) -> None:
    one = app.task(name="one", retry_on=TimeoutError)(lambda: None)
    many = app.task(name="many", retry_on=[TimeoutError, KeyError])(lambda: None)
    assert one.opts.retry_on == (TimeoutError,)
    assert many.opts.retry_on == (TimeoutError, KeyError)


def test_a_stored_schedule_naming_a_task_this_app_lacks_is_warned_about(
    app: rota.App, caplog: pytest.LogCaptureFixture
) -> None:
    """A typo is named with the close task, in one warning; a task only another app (the
    workers') registers is allowed: its schedule is stored all the same."""
    app.task(name="report")(lambda: None)
    with caplog.at_level("WARNING", "rota"):
        app.add_schedule("daily", "reprot", every=60)
        app.add_schedule("hourly", "report", every=60)
        app.update_schedule("daily", every=120)  # its task unchanged: no second warning
        app.update_schedule("hourly", task="reprot")
    warned = [r.getMessage() for r in caplog.records if "does not register" in r.getMessage()]
    assert warned == [
        f"schedule {name!r} names task 'reprot', which this app does not register (did you mean 'report'?): "
        "its runs fail with TaskNotFound unless the workers' app registers it"
        for name in ("daily", "hourly")
    ]
    assert {s.name for s in app.list_schedules()} == {"daily", "hourly"}
    with pytest.raises(
        rota.TaskNotFound, match=r"^no task named 'reprot' \(did you mean 'report'\?\); this app registers: report$"
    ):
        app.get_task("reprot")


@pytest.mark.parametrize(
    "make",
    [
        lambda app: rota.Rate(5, per=timedelta(seconds=-1)),
        lambda app: app.schedule(every=60, jitter=timedelta(seconds=-1))(lambda: None),
        lambda app: app.schedule(every=60, misfire_grace=timedelta(seconds=-1))(lambda: None),
    ],
)
def test_a_negative_timedelta_is_named_in_seconds(app: rota.App, make: Any) -> None:
    """Not as its repr, `timedelta(days=-1, seconds=86399)`, for minus one second."""
    with pytest.raises(rota.ConfigurationError, match=r"got timedelta of -1 seconds$"):
        make(app)


def _send(app: rota.App) -> Any:
    @app.task(name="shop.send")
    def send(to: str, subject: str, body: str = "") -> None: ...

    return send


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        (("a", "b", "c", "d"), {}, "cannot take 4 positional argument(s): too many positional arguments"),
        (("a",), {}, "missing a required argument: 'subject'"),
        (("a", "b"), {"bogus": 1}, "and 'bogus': got an unexpected keyword argument 'bogus'"),
        (("a", "b"), {"to": "x"}, "multiple values for argument 'to'"),
    ],
)
def test_arguments_the_handler_cannot_take_are_refused_at_enqueue_and_nothing_is_stored(
    app: rota.App, args: tuple[Any, ...], kwargs: dict[str, Any], message: str
) -> None:
    send = _send(app)
    with pytest.raises(rota.ConfigurationError) as caught:
        send.enqueue(*args, **kwargs)
    assert str(caught.value).startswith("shop.send(to, subject, body='') cannot take ")
    assert message in str(caught.value) and "\n" not in str(caught.value)
    with pytest.raises(rota.ConfigurationError, match=r"^enqueue_many item 1: shop\.send\(to, subject"):
        send.enqueue_many([(("a", "b"), {}), (args, kwargs)])
    assert app.list_runs() == []  # the good item of the batch is not stored either
    send.enqueue("a", "b")
    send.enqueue(to="a", subject="b", body="c")
    assert len(app.list_runs()) == 2


def test_a_context_parameter_is_not_counted_and_varargs_take_anything(app: rota.App) -> None:
    @app.task(name="with_ctx", pass_context=True)
    def with_ctx(ctx: rota.RunContext, n: int) -> None: ...

    @app.task(name="anything")
    def anything(*args: Any, **kwargs: Any) -> None: ...

    with pytest.raises(rota.ConfigurationError, match=r"^with_ctx\(n\) cannot take 2 positional"):
        with_ctx.enqueue(1, 2)
    with_ctx.enqueue(1)
    anything.enqueue(1, 2, x=3)
    anything.enqueue()


def test_a_schedule_whose_arguments_its_handler_cannot_take_fails_at_the_decorator(app: rota.App) -> None:
    with pytest.raises(rota.ConfigurationError, match=r"^schedule 'nightly': nightly\(month\) cannot take 2"):

        @app.schedule(every=60, name="nightly", args=(1, 2))
        def report(month: int) -> None: ...

    assert "nightly" not in app.schedules and "nightly" not in app.tasks  # (the task takes the schedule's name)


@pytest.mark.parametrize("jitter", [math.nan, math.inf, 1e300, -1e300, timedelta(days=400)])
def test_a_jitter_that_is_not_a_finite_duration_is_refused_in_one_line(app: rota.App, jitter: float) -> None:
    @app.task(name="t")
    def t() -> None: ...

    message = r"^jitter must be seconds from 0 to a year \(31622400\) or a timedelta, got "
    with pytest.raises(rota.ConfigurationError, match=message):
        app.add_schedule("s", "t", every=60, jitter=jitter)
    with pytest.raises(rota.ConfigurationError, match=message):
        app.schedule(every=60, jitter=jitter, name="d")(t)
    app.add_schedule("s", "t", every=60)
    with pytest.raises(rota.ConfigurationError, match=message):
        app.update_schedule("s", jitter=jitter)


def test_retry_many_takes_since_in_seconds_and_refuses_a_task_nothing_names(app: rota.App) -> None:
    @app.task(name="declared")
    def declared() -> None: ...

    assert app.retry_many(since=3600) == 0  # seconds, as every other duration of the API
    assert app.retry_many(task="declared") == 0  # declared, nothing failed yet
    with pytest.raises(
        rota.ConfigurationError, match=r"^no run of task 'declard' exists \(did you mean 'declared'\?\)"
    ):
        app.retry_many(task="declard")
    for since in (0, -1, math.nan, math.inf, 1e300, True, "6h", timedelta(0), timedelta.max):
        with pytest.raises(rota.ConfigurationError, match="since must be a positive timedelta or number of seconds"):
            app.retry_many(since=since)  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", [rota.Limit, rota.Rate])
@pytest.mark.parametrize(
    "name", ["", "   ", "\t", "x" * 201, "x" * 100_000, 5, b"stripe", b"x" * 100_000, ["x"] * 100_000, range(10**6)]
)
def test_a_pool_name_that_is_empty_blank_too_long_or_not_text_is_refused_in_one_short_line(
    kind: Any, name: object
) -> None:
    extra = {"per": 1} if kind is rota.Rate else {}
    what = kind.__name__
    with pytest.raises(
        rota.ConfigurationError, match=rf"^{what} name must be a non-empty string of at most 200 characters, got "
    ) as raised:
        kind(1, name=name, **extra)
    message = str(raised.value)
    assert "\n" not in message and len(message) < 200, message  # never the whole value echoed back
    if isinstance(name, str) and len(name) > 200:
        assert message.endswith(f"... ({len(name)} characters)")
    elif isinstance(name, bytes | list) and len(name) > 200:  # not text: cut all the same
        assert message.endswith(f"... ({len(name)} {'bytes' if isinstance(name, bytes) else 'items'})")


@pytest.mark.parametrize("kind", [rota.Limit, rota.Rate])
@pytest.mark.parametrize("name", ["a\nb", "tab\there", "\x1frota:unresolved"])
def test_a_pool_name_is_one_printable_line_as_every_other_name(kind: Any, name: str) -> None:
    extra = {"per": 1} if kind is rota.Rate else {}
    with pytest.raises(rota.ConfigurationError, match="contains the control character"):
        kind(1, name=name, **extra)
