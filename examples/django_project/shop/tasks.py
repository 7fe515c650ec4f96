"""The rota App of the project and its tasks (`rota worker shop.tasks:app` works too)."""

from __future__ import annotations

from django.conf import settings

import rota

app = rota.App(settings.ROTA_DATABASE_URL)


@app.task(name="shop.send_receipt", retries=3)
def send_receipt(order_id: int) -> str:
    from shop.models import Order

    order = Order.objects.get(id=order_id)  # committed with the run: it is always there
    return f"receipt for order {order.id} sent to {order.email}"
