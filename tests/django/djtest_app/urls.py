from django.urls import include, path

urlpatterns = [path("ops/venturi/", include("venturi.contrib.django.urls"))]
