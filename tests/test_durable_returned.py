"""Which steps a handler returns at once (rota/durable.py, `_returns_at_once`): that step's
checkpoint goes with the run's finish, every other one commits before the handler goes on.
The check reads CPython's bytecode, which differs from 3.11 to 3.13 (RETURN_CONST, CALL_KW,
the frame's f_lasti on the call or on its last cache entry): each shape below is compiled by
the Python running the suite, so the suite on each supported version checks that version."""

from __future__ import annotations

import dis
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import rota
from rota.durable import Durable, _returns_at_once
from rota.runs import RunContext


def _one(x: int = 1) -> int:
    return x


def returned(ctx: RunContext) -> Any:
    return ctx.step("s", _one)


def returned_with_keywords(ctx: RunContext) -> Any:
    return ctx.step("s", _one, x=2)


def returned_with_star(ctx: RunContext) -> Any:
    args = ("s", _one)
    return ctx.step(*args)


def dropped_at_the_end(ctx: RunContext) -> None:
    ctx.step("s", _one)


def dropped_then_return(ctx: RunContext) -> None:
    ctx.step("s", _one)
    return


def returned_in_try_except(ctx: RunContext) -> Any:
    try:
        return ctx.step("s", _one)
    except ValueError:
        return None


def computed(ctx: RunContext) -> Any:
    return ctx.step("s", _one) + 1


def assigned(ctx: RunContext) -> Any:
    x = ctx.step("s", _one)
    return x


def returned_in_finally(ctx: RunContext) -> Any:
    try:
        return ctx.step("s", _one)
    finally:
        _one()


def returned_in_with(ctx: RunContext) -> Any:
    with _Nothing():
        return ctx.step("s", _one)


def returned_in_a_loop(ctx: RunContext) -> Any:
    for _ in range(1):
        return ctx.step("s", _one)  # the loop's iterator is popped first: not at once
    return None


def _helper(ctx: RunContext) -> Any:
    return ctx.step("s", _one)


def returned_by_a_helper(ctx: RunContext) -> Any:
    return _helper(ctx)  # the step's caller is not the handler: not at once


class _Nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


AT_ONCE = [returned, returned_with_keywords, returned_with_star, dropped_at_the_end, dropped_then_return,
           returned_in_try_except]  # fmt: skip
NOT_AT_ONCE = [computed, assigned, returned_in_finally, returned_in_with, returned_in_a_loop, returned_by_a_helper]


@pytest.fixture
def context(app: rota.App) -> Iterator[Callable[[Callable[..., Any]], tuple[Durable, RunContext]]]:
    """A claimed run's context whose handler is `fn`, as the worker makes it."""
    task = app.task(name="held")(lambda: None)

    def make(fn: Callable[..., Any]) -> tuple[Durable, RunContext]:
        task.enqueue()
        (c,) = app.store.claim("w1", 1, None, 30.0, 1)
        durable = Durable(app.store, c.id, c.token, c.task, steps=c.steps, handler=fn.__code__)
        ctx = RunContext(str(c.id), c.task, c.attempt, c.max_attempts, c.token, c.scheduled_for, None,
                         durable=durable)  # fmt: skip
        return durable, ctx

    yield make


def _tracer(frame: Any, event: str, arg: Any) -> Any:
    return _tracer


@pytest.mark.parametrize("traced", [False, True], ids=["plain", "traced"])
@pytest.mark.parametrize("fn", AT_ONCE + NOT_AT_ONCE, ids=lambda fn: fn.__name__)
def test_only_a_step_returned_at_once_waits_for_the_finish(
    app: rota.App, context: Any, fn: Callable[..., Any], traced: bool
) -> None:
    """Under a tracer too (a debugger, coverage): CPython 3.12+ instruments the bytecode then."""
    durable, ctx = context(fn)
    old = sys.gettrace()
    if traced:
        sys.settrace(_tracer)
    try:
        fn(ctx)
    finally:
        sys.settrace(old)
    saved = [s.name for s in app.store.steps_of(durable.run_id)]
    if fn in AT_ONCE:
        assert durable.deferred is not None and durable.deferred["name"] == "s" and saved == []
    else:
        assert durable.deferred is None and saved == ["s"]


def test_an_offset_that_is_not_a_call_is_not_a_step_returned_at_once() -> None:
    """Only the call's own offset counts: an instruction just before a return that is not a
    call (a frame stopped elsewhere, a bytecode this does not know) answers False, which
    costs one group commit and never loses a checkpoint."""

    def loads_then_returns() -> Any:
        return _one

    (load,) = [i for i in dis.get_instructions(loads_then_returns) if i.opname.startswith("LOAD")]
    assert not _returns_at_once(loads_then_returns.__code__, load.offset)
