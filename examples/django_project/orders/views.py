from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from orders.models import Order
from orders.services import place_order
from orders.tasks import send_confirmation


@csrf_exempt  # an API endpoint of the example; a real one authenticates its callers
@require_POST
def create_order(request: HttpRequest) -> JsonResponse:
    order = place_order(request.GET.get("item", "book"))
    return JsonResponse({"order": order.pk, "confirmation": order.confirmation}, status=201)


def show_order(request: HttpRequest, order_id: int) -> JsonResponse:
    order = Order.objects.get(pk=order_id)
    result = send_confirmation.get_result(order.confirmation)
    body = {"order": order.pk, "item": order.item, "status": result.status}
    if result.is_finished and not result.errors:
        body["confirmation"] = result.return_value
    return JsonResponse(body)
