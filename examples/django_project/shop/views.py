from __future__ import annotations

from django.db import connection, transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from shop.models import Order
from shop.tasks import send_receipt


@csrf_exempt
@require_POST
def place_order(request: HttpRequest) -> JsonResponse:
    """The order and its receipt's run commit together, or neither does."""
    with transaction.atomic():
        order = Order.objects.create(email=request.POST["email"])
        connection.ensure_connection()
        # connection.connection: the driver connection (psycopg, sqlite3, mysqlclient) Django's transaction is on
        handle = send_receipt.options(connection=connection.connection).enqueue(order.id)
        if request.POST.get("fail"):
            raise ValueError("refused after enqueue: the order and the run roll back together")
    return JsonResponse({"order": order.id, "run": handle.id})
