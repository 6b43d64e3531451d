"""Found by venturi.contrib.django's autodiscovery (every installed app's tasks.py)."""

from django.utils import timezone

import venturi

try:
    from django.tasks import task  # Django 6
except ImportError:  # Django 5.2 with the django-tasks backport
    from django_tasks import task

from orders.models import Order


@task(queue_name="mail", takes_context=True)
def send_confirmation(context, order_id: int) -> str:
    """Runs in ``manage.py venturi worker``; the ORM works as in a view."""
    order = Order.objects.get(pk=order_id)
    order.confirmed_at = timezone.now()
    order.save(update_fields=["confirmed_at"])
    return f"confirmed order {order.pk} ({order.item}) on attempt {context.attempt}"


@venturi.task(schedule="0 3 * * *")
def purge_old_orders() -> int:
    """A plain venturi task (run by ``manage.py venturi beat`` every night)."""
    cutoff = timezone.now() - timezone.timedelta(days=365)
    deleted, _ = Order.objects.filter(created_at__lt=cutoff).delete()
    return deleted
