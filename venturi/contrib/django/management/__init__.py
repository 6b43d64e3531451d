"""Django's management package of the venturi app."""

__all__: list[str] = []
