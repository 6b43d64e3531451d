"""Django's commands of the venturi app: ``manage.py venturi`` (``venturi.py``)."""

__all__: list[str] = []
