from django.db import models


class Order(models.Model):
    item = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)
    #: The id of the confirmation task (a venturi job id).
    confirmation = models.CharField(max_length=26, blank=True)
    confirmed_at = models.DateTimeField(null=True)
