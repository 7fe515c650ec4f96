"""Run by tests/test_django.py with pytest-django: rota_django_app on Django's test database."""

from __future__ import annotations

import pytest
from orders.models import Order
from orders.tasks import confirm, place

import rota
import rota.testing


def test_an_enqueue_on_djangos_connection_is_seen(rota_django_app: rota.App) -> None:
    order_id = place("ada@example.com")
    run = rota.testing.assert_enqueued(rota_django_app, confirm, order_id)
    assert rota.testing.run_pending(rota_django_app) == 1
    assert rota_django_app.get_run(run.id).result == "confirmed ada@example.com"


def test_a_rolled_back_order_has_no_run(rota_django_app: rota.App) -> None:
    with pytest.raises(ValueError):
        place("bob@example.com", fail=True)
    rota.testing.assert_not_enqueued(rota_django_app, confirm)
    assert Order.objects.count() == 0


def test_each_test_starts_with_empty_tables(rota_django_app: rota.App) -> None:
    assert rota_django_app.list_runs() == [] and Order.objects.count() == 0
    place("eve@example.com")
    assert len(rota_django_app.list_runs()) == 1


def test_again_empty(rota_django_app: rota.App) -> None:
    assert rota_django_app.list_runs() == [] and Order.objects.count() == 0


@pytest.mark.django_db
def test_with_the_django_db_mark_too(rota_django_app: rota.App, db: None) -> None:
    place("kim@example.com")  # the fixture's transactional_db wins over db and the mark
    assert len(rota_django_app.list_runs()) == 1
