"""The Django app (``INSTALLED_APPS = [..., "venturi.contrib.django"]``)."""

from __future__ import annotations

from django.apps import AppConfig
from django.utils.module_loading import autodiscover_modules

__all__ = ["VenturiConfig"]


class VenturiConfig(AppConfig):  # type: ignore[misc]
    name = "venturi.contrib.django"
    label = "venturi"
    verbose_name = "venturi"

    def ready(self) -> None:
        """Build the App (the current App of ``@venturi.task`` functions), import every
        installed app's ``tasks`` module, and arm the in-server worker if configured."""
        from venturi.contrib.django.server import arm
        from venturi.contrib.django.state import get_app, get_settings

        config = get_settings()
        get_app()
        if config.autodiscover:
            autodiscover_modules("tasks")
        if config.worker_in_server is not None:
            arm(config.worker_in_server, config.grace)
