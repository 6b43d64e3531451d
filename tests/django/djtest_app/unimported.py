"""A task module no worker imports: not ``tasks.py``, and imported by nothing at startup."""

from venturi.contrib.django.compat import task


@task
def never_served() -> str:
    return "unreachable"
