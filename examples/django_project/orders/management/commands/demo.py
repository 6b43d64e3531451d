"""``manage.py demo``: place an order, roll one back, and wait for the worker's confirmation."""

import time

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from orders.models import Order
from orders.services import place_order
from orders.tasks import send_confirmation


class Rollback(Exception):
    pass


class Command(BaseCommand):
    help = "Place two orders (one rolled back) and print the confirmation of the other."

    def add_arguments(self, parser):
        parser.add_argument("--timeout", type=float, default=60.0)

    def handle(self, *args, timeout: float, **options):
        try:
            with transaction.atomic():
                place_order("umbrella")
                raise Rollback
        except Rollback:
            pass
        order = place_order("book")
        self.stdout.write(f"orders in the database: {Order.objects.count()}")
        result = send_confirmation.get_result(order.confirmation)
        deadline = time.monotonic() + timeout
        while not result.is_finished:
            if time.monotonic() > deadline:
                raise CommandError(f"no worker confirmed order {order.pk} in {timeout:g}s")
            time.sleep(0.2)
            result.refresh()
        self.stdout.write(f"{result.status}: {result.return_value}")
