from django.contrib import admin
from django.urls import include, path
from orders import views

urlpatterns = [
    path("admin/", admin.site.urls),
    path("orders", views.create_order),
    path("orders/<int:order_id>", views.show_order),
    # The venturi dashboard, for staff users (venturi.contrib.django.dashboard).
    path("ops/venturi/", include("venturi.contrib.django.urls")),
]
