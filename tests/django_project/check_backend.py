"""Run by tests/test_django.py with pytest-django: the Django Tasks backend on rota."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone
from orders.models import Order
from orders.tasks import count_orders, double, refuse, which_attempt

import rota
import rota.testing


def test_an_enqueue_in_a_rolled_back_transaction_never_existed(rota_django_app: rota.App) -> None:
    with pytest.raises(ValueError), transaction.atomic():
        Order.objects.create(email="bob@example.com")
        count_orders.enqueue()
        raise ValueError("refused")
    assert rota_django_app.list_runs() == []
    with transaction.atomic():
        Order.objects.create(email="ada@example.com")
        result = count_orders.enqueue()
        assert result.status == "READY"
    run = rota.testing.assert_enqueued(rota_django_app, "rota.django.run", "orders.tasks.count_orders", [], {})
    assert run.id == result.id
    assert rota.testing.run_pending(rota_django_app) == 1
    result.refresh()
    assert result.status == "SUCCESSFUL" and result.return_value == 1
    assert count_orders.get_result(result.id).return_value == 1


def test_a_failure_and_the_context(rota_django_app: rota.App) -> None:
    failed = refuse.enqueue("no stock")
    told = which_attempt.enqueue("ctx")
    doubled = double.using(priority=5, queue_name="math").enqueue(21)
    later = count_orders.using(run_after=timezone.now() + timedelta(days=3650)).enqueue()
    run = rota_django_app.get_run(doubled.id)
    assert (run.queue, run.priority) == ("math", 5)
    assert rota.testing.run_pending(rota_django_app) == 3
    assert double.get_result(doubled.id).return_value == 42  # an async task
    failed.refresh()
    assert failed.status == "FAILED" and failed.errors[-1].exception_class is ValueError
    assert "no stock" in failed.errors[-1].traceback
    assert which_attempt.get_result(told.id).return_value == "ctx attempt 1"
    assert count_orders.get_result(later.id).status == "READY"


def test_schedules_of_django_tasks(rota_django_app: rota.App) -> None:
    spec = rota_django_app.schedules["nightly-count"]
    assert spec.task == "rota.django.run" and spec.cron == "0 3 * * *"
