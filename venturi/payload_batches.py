"""``delay_many``'s batches for a task with a template: each batch's payloads made as
they are read.

A payload is bound, encoded and checked when the backend reads it, so a COPY
sends its first rows while the later ones are still being made, instead of the
server waiting for the whole batch to be validated first (ADR 0145). A refused
item raises while the backend reads, which writes nothing of its batch (the
``enqueue_alike`` contract), and its error's note names the item and the jobs of
earlier batches already enqueued, as before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import islice
from typing import Any, overload

from venturi.errors import EnqueueError

__all__ = ["LazyPayloads", "payload_batches"]


class LazyPayloads(Sequence[str]):
    """One batch's payloads: ``make(item)`` of each item, made when read (each read
    makes it again) and as long as the items."""

    __slots__ = ("_before", "_call", "_items", "_make")

    def __init__(
        self, items: list[Any], make: Callable[[Any], str], call: str, before: int
    ) -> None:
        self._items, self._make, self._call, self._before = items, make, call, before

    def __len__(self) -> int:
        return len(self._items)

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[str]: ...
    def __getitem__(self, index: int | slice) -> str | Sequence[str]:
        if isinstance(index, slice):
            return [self[position] for position in range(*index.indices(len(self._items)))]
        position = range(len(self._items))[index]
        try:
            return self._make(self._items[position])
        except EnqueueError as exc:
            self._note(exc, position)
            raise

    def __iter__(self) -> Iterator[str]:
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


def payload_batches(
    items: Iterable[Any], batch_size: int, make: Callable[[Any], str], call: str
) -> Iterator[LazyPayloads]:
    """``items`` in batches of ``batch_size`` as ``LazyPayloads``; the caller writes
    each before asking for the next, so the items before a batch are enqueued."""
    remaining = iter(items)
    before = 0
    while chunk := list(islice(remaining, batch_size)):
        yield LazyPayloads(chunk, make, call, before)
        before += len(chunk)
