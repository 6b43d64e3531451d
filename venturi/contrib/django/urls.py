"""``path("venturi/", include("venturi.contrib.django.urls"))``: the dashboard (dashboard.py)."""

from django.urls import re_path

from venturi.contrib.django.dashboard import dashboard_view

__all__ = ["app_name", "urlpatterns"]

app_name = "venturi"
urlpatterns = [re_path(r"^(?P<path>.*)$", dashboard_view, name="dashboard")]
