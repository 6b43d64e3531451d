"""``delay_many``'s batches, their items made as they are read (``venturi.batches``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from venturi.batches import LazyBatch, lazy_batches
from venturi.errors import InvalidPayload


def _make(item: int) -> str:
    if item < 0:
        raise InvalidPayload(f"{item} is refused")
    return f'{{"n": {item}}}'


def test_a_batch_reads_as_the_sequence_of_its_payloads() -> None:
    payloads = LazyBatch([0, 1, 2], _make, "delay_many('k')", before=0)

    assert len(payloads) == 3
    assert list(payloads) == ['{"n": 0}', '{"n": 1}', '{"n": 2}']
    assert payloads[0] == '{"n": 0}'
    assert payloads[-1] == '{"n": 2}'
    assert payloads[1:] == ['{"n": 1}', '{"n": 2}']
    with pytest.raises(IndexError):
        payloads[3]


def test_a_refused_item_raises_as_it_is_read_with_a_note_of_its_place() -> None:
    payloads = LazyBatch([0, -1, 2], _make, "delay_many('k')", before=10)

    with pytest.raises(InvalidPayload) as caught:
        list(payloads)

    assert caught.value.__notes__ == [
        "item 11 of delay_many('k'); 10 job(s) of earlier batches were already enqueued"
    ]
    with pytest.raises(InvalidPayload) as indexed:
        payloads[1]
    assert "item 11 of delay_many('k')" in indexed.value.__notes__[0]


def test_batches_take_the_items_one_batch_at_a_time() -> None:
    taken: list[int] = []

    def items() -> Iterator[int]:
        for n in range(5):
            taken.append(n)
            yield n

    batches = lazy_batches(items(), 2, _make, "delay_many('k')")
    first = next(batches)
    assert (len(first), taken) == (2, [0, 1])
    assert [len(batch) for batch in batches] == [2, 1]
    assert taken == [0, 1, 2, 3, 4]
    assert list(lazy_batches([], 2, _make, "delay_many('k')")) == []


def test_a_later_batch_counts_the_items_of_the_earlier_ones() -> None:
    first, second = lazy_batches([0, 1, 2, -1], 2, _make, "delay_many('k')")

    assert list(first) == ['{"n": 0}', '{"n": 1}']
    with pytest.raises(InvalidPayload) as caught:
        list(second)
    assert caught.value.__notes__ == [
        "item 3 of delay_many('k'); 2 job(s) of earlier batches were already enqueued"
    ]
