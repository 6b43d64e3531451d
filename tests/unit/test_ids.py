"""Job ids (venturi.ids, ADR 0132): the same canonical ULIDs python-ulid makes, on a million ids."""

from __future__ import annotations

import os
import secrets
import threading
import time

import pytest
from ulid import ULID

from venturi.ids import encode, new_id, new_ids

MILLION = 1_000_000


@pytest.mark.slow
def test_encoding_equals_python_ulid_on_a_million_values() -> None:
    """Random 128-bit values and the edges: the same 26 characters as ``str(ULID)``."""
    edges = [0, 1, 1023, 1024, (1 << 80) - 1, 1 << 80, (1 << 128) - 1]
    values = edges + [secrets.randbits(128) for _ in range(MILLION)]
    for value in values:
        assert encode(value) == str(ULID.from_bytes(value.to_bytes(16, "big"))), value


@pytest.mark.slow
def test_a_million_ids_round_trip_through_python_ulid_in_increasing_order() -> None:
    before_ms = time.time_ns() // 1_000_000
    ids = [new_id() for _ in range(MILLION)]
    after_ms = time.time_ns() // 1_000_000
    previous = ""
    for text in ids:
        parsed = ULID.from_str(text)
        assert str(parsed) == text  # canonical: upper case, 26 characters, round trip
        assert before_ms <= parsed.milliseconds <= after_ms
        assert text > previous  # strictly increasing: monotonic, hence unique
        previous = text
    assert len(text) == 26


def test_ids_made_in_one_millisecond_increment_the_randomness() -> None:
    """python-ulid's default generator does the same (its monotonic policy)."""
    for _ in range(100):
        first, second = (int.from_bytes(ULID.from_str(new_id()).bytes, "big") for _ in range(2))
        if first >> 80 == second >> 80:  # the same millisecond
            assert second == first + 1
            return
    pytest.fail("no pair of 100 shared a millisecond")


def test_a_new_milliseconds_id_spells_its_value_and_the_next_adds_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first id of a millisecond is spelled from the cached upper characters of its
    time and the two halves of its randomness, not from its value: the text and the
    value kept for the next id must agree, across a change of the time's upper
    characters (every 1,024 ms) and a refill of the randomness block."""
    clock = [1_700_000_000_000 * 1_000_000 + 1023 * 1_000_000]
    monkeypatch.setattr(time, "time_ns", lambda: clock[0])
    for _ in range(500):  # more new milliseconds than one block of randomness holds
        first, second = new_id(), new_id()
        first_value = int.from_bytes(ULID.from_str(first).bytes, "big")
        assert encode(first_value) == first
        assert first_value >> 80 == clock[0] // 1_000_000
        assert int.from_bytes(ULID.from_str(second).bytes, "big") == first_value + 1
        clock[0] += 1_000_000


def test_a_batch_of_ids_continues_the_sequence_in_one_millisecond() -> None:
    """``new_ids`` (delay_many's batches): canonical ULIDs, after the ids made before and
    before those made after, consecutive values within the batch's millisecond."""
    before_ms = time.time_ns() // 1_000_000
    first = new_id()
    batch = new_ids(5_000)
    last = new_id()
    after_ms = time.time_ns() // 1_000_000
    values = [int.from_bytes(ULID.from_str(text).bytes, "big") for text in batch]
    assert [str(ULID.from_str(text)) for text in batch] == batch
    assert first < batch[0] and batch[-1] < last
    assert len({value >> 80 for value in values}) == 1
    assert before_ms <= values[0] >> 80 <= after_ms
    assert values == list(range(values[0], values[0] + len(values)))
    assert new_ids(0) == []


def test_threads_never_share_an_id() -> None:
    made: list[list[str]] = [[] for _ in range(8)]

    def make(into: list[str]) -> None:
        for _ in range(25_000):
            into.append(new_id())

    threads = [threading.Thread(target=make, args=(into,)) for into in made]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    every = [text for into in made for text in into]
    assert len(set(every)) == len(every) == 8 * 25_000
    assert all(into == sorted(into) for into in made)


def test_a_forked_child_never_repeats_its_parents_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a reset at fork the child would continue the parent's sequence from the
    same state and, in the same millisecond (the clock is held still here), hand out
    exactly the parent's next ids."""
    still = time.time_ns()
    monkeypatch.setattr(time, "time_ns", lambda: still)
    new_id()  # the parent has state to inherit
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: 1,000 ids to the pipe, then exit at once
        os.close(read)
        os.write(write, "".join(new_id() for _ in range(1_000)).encode())
        os._exit(0)
    os.close(write)
    parent = {new_id() for _ in range(1_000)}
    chunks = []
    while chunk := os.read(read, 65536):
        chunks.append(chunk)
    os.close(read)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    data = b"".join(chunks).decode()
    child = {data[i : i + 26] for i in range(0, len(data), 26)}
    assert len(child) == 1_000
    assert not parent & child
