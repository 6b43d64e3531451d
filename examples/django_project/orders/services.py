from django.db import transaction

from orders.models import Order
from orders.tasks import send_confirmation


def place_order(item: str) -> Order:
    """The order and its confirmation job commit together, or neither exists."""
    with transaction.atomic():
        order = Order.objects.create(item=item)
        result = send_confirmation.enqueue(order.pk)  # on Django's connection
        order.confirmation = result.id
        order.save(update_fields=["confirmation"])
    return order
