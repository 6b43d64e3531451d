"""``delay_many``'s batches: each batch's items made (bound, encoded, checked) as they
are read.

For a task with a template, the backend reads the batch's payloads while its COPY
sends them, so the server starts on the first rows while the later ones are still
being made (ADR 0145); a refused item raises while the backend reads, which writes
nothing of its batch (the ``enqueue_alike`` contract). A task without one reads its
batch into a list of ``NewJob``s before any statement. Either way the refusal's
note names the item and the jobs of earlier batches already enqueued.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import islice
from typing import Any, TypeVar, overload

from venturi.errors import EnqueueError

__all__ = ["LazyBatch", "lazy_batches"]

T = TypeVar("T")


class LazyBatch(Sequence[T]):
    """One batch: ``make(item)`` of each item, made when read (each read makes it
    again) and as long as the items."""

    __slots__ = ("_before", "_call", "_items", "_make")

    def __init__(self, items: list[Any], make: Callable[[Any], T], call: str, before: int) -> None:
        self._items, self._make, self._call, self._before = items, make, call, before

    def __len__(self) -> int:
        return len(self._items)

    @overload
    def __getitem__(self, index: int) -> T: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[T]: ...
    def __getitem__(self, index: int | slice) -> T | Sequence[T]:
        if isinstance(index, slice):
            return [self[position] for position in range(*index.indices(len(self._items)))]
        position = range(len(self._items))[index]
        try:
            return self._make(self._items[position])
        except EnqueueError as exc:
            self._note(exc, position)
            raise

    def __iter__(self) -> Iterator[T]:
        make = self._make
        position = 0
        try:
            for item in self._items:
                yield make(item)
                position += 1
        except EnqueueError as exc:
            self._note(exc, position)
            raise

    def _note(self, exc: EnqueueError, position: int) -> None:
        exc.add_note(
            f"item {self._before + position} of {self._call}; "
            f"{self._before} job(s) of earlier batches were already enqueued"
        )


def lazy_batches(
    items: Iterable[Any], batch_size: int, make: Callable[[Any], T], call: str
) -> Iterator[LazyBatch[T]]:
    """``items`` in batches of ``batch_size`` as ``LazyBatch``es; the caller writes
    each before asking for the next, so the items before a batch are enqueued."""
    remaining = iter(items)
    before = 0
    while chunk := list(islice(remaining, batch_size)):
        yield LazyBatch(chunk, make, call, before)
        before += len(chunk)
