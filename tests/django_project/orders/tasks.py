from __future__ import annotations

from django.db import connection, transaction

import rota
from rota.contrib.django import database_url

app = rota.App(database_url())


@app.task(name="orders.confirm")
def confirm(order_id: int) -> str:
    from orders.models import Order

    return f"confirmed {Order.objects.get(id=order_id).email}"


def place(email: str, *, fail: bool = False) -> int:
    """The code under test: the order and its run commit together, on Django's connection."""
    from orders.models import Order

    with transaction.atomic():
        order = Order.objects.create(email=email)
        confirm.options(connection=connection.connection).enqueue(order.id)
        if fail:
            raise ValueError("refused")
    return order.id


try:
    from django.tasks import TaskContext, task  # Django 6
except ImportError:
    from django_tasks import TaskContext, task  # the django-tasks backport


@task()
def count_orders() -> int:
    from orders.models import Order

    return Order.objects.count()


@task()
def refuse(reason: str) -> None:
    raise ValueError(reason)


@task(takes_context=True)
def which_attempt(context: TaskContext, label: str) -> str:
    return f"{label} attempt {context.attempt}"


@task()
async def double(number: int) -> int:
    return 2 * number
