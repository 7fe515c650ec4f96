"""The rota App of the project and its tasks (`python manage.py rota_worker` runs them)."""

from __future__ import annotations

try:
    from django.tasks import task  # Django 6
except ImportError:
    from django_tasks import task  # the django-tasks backport

import rota
from rota.contrib.django import database_url

app = rota.App(database_url())  # settings.ROTA["DATABASE_URL"], else Django's default database


@app.task(name="shop.send_receipt", retries=3)
def send_receipt(order_id: int) -> str:
    from shop.models import Order

    order = Order.objects.get(id=order_id)  # committed with the run: it is always there
    return f"receipt for order {order.id} sent to {order.email}"


@task()
def summary() -> int:
    """A Django task (TASKS backend: rota): `summary.enqueue()`, and a rota schedule at 06:00."""
    from shop.models import Order

    return Order.objects.count()
