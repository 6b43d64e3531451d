"""The Django app (``INSTALLED_APPS = [..., "venturi.contrib.django"]``)."""

from __future__ import annotations

from django.apps import AppConfig
from django.utils.module_loading import autodiscover_modules


class VenturiConfig(AppConfig):  # type: ignore[misc]
    name = "venturi.contrib.django"
    label = "venturi"
    verbose_name = "venturi"

    def ready(self) -> None:
        """Build the App (the current App of ``@venturi.task`` functions), import every
        installed app's ``tasks`` module, and arm the in-server worker if configured."""
        from venturi.contrib.django import server, state

        config = state.get_settings()
        state.get_app()
        if config.autodiscover:
            autodiscover_modules("tasks")
        if config.worker_in_server is not None:
            server.arm(config.worker_in_server, config.grace)
