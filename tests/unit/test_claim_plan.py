"""Claim planning: kinds with room, a limit no cap can overrun, claim-ahead room, the lease."""

from __future__ import annotations

from datetime import timedelta

from venturi.runtime.claim_plan import ClaimPlan, ClaimRequest
from venturi.runtime.prefetch import Prefetch

MINUTE = timedelta(minutes=1)
LEASES = {"a": MINUTE, "b": 5 * MINUTE, "c": 2 * MINUTE}


def test_uncapped_kinds_are_all_asked_for_in_sorted_order_with_the_free_slots_as_limit() -> None:
    plan = ClaimPlan(leases={"b": MINUTE, "a": MINUTE}, concurrency=8)
    assert plan.request(free=8, running={}, is_renewed=True) == ClaimRequest(("a", "b"), 8, MINUTE)


def test_the_limit_is_the_smallest_room_among_the_capped_kinds_asked_for() -> None:
    plan = ClaimPlan(leases=LEASES, caps={"a": 3, "b": 5}, concurrency=8)
    request = plan.request(free=8, running={"a": 1, "b": 1}, is_renewed=True)
    assert request is not None
    assert request.kinds == ("a", "b", "c")
    assert request.limit == 2  # a: 3 - 1


def test_a_kind_at_its_cap_is_left_out_and_no_longer_bounds_the_limit() -> None:
    plan = ClaimPlan(leases=LEASES, caps={"a": 2, "b": 5}, concurrency=8)
    request = plan.request(free=8, running={"a": 2, "b": 4}, is_renewed=True)
    assert request is not None
    assert request.kinds == ("b", "c")
    assert request.limit == 1


def test_nothing_is_claimed_without_free_slots_or_when_every_kind_is_at_its_cap() -> None:
    plan = ClaimPlan(leases={"a": MINUTE}, caps={"a": 1}, concurrency=4)
    assert plan.request(free=0, running={}, is_renewed=True) is None
    assert plan.request(free=-1, running={}, is_renewed=True) is None
    assert plan.request(free=4, running={"a": 1}, is_renewed=True) is None


def test_a_plan_serving_no_kinds_claims_nothing() -> None:
    plan = ClaimPlan(leases={}, concurrency=4)
    assert plan.kinds == ()
    assert plan.request(free=4, running={}, is_renewed=False) is None


def test_renewed_claims_take_the_shortest_lease_and_unrenewed_ones_the_longest() -> None:
    plan = ClaimPlan(leases=LEASES)
    assert plan.lease(["a", "b", "c"], is_renewed=True) == MINUTE
    assert plan.lease(["a", "b", "c"], is_renewed=False) == 5 * MINUTE
    assert plan.lease(["c"], is_renewed=False) == 2 * MINUTE


def test_the_lease_is_chosen_among_the_kinds_asked_for_only() -> None:
    plan = ClaimPlan(leases=LEASES, caps={"b": 1})
    request = plan.request(free=4, running={"b": 1}, is_renewed=False)
    assert request == ClaimRequest(("a", "c"), 4, 2 * MINUTE)


def test_room_with_an_idle_handler_is_every_free_slot_plus_the_claim_ahead_depth() -> None:
    plan = ClaimPlan(leases=LEASES, concurrency=4)
    prefetch = Prefetch(concurrency=4, limit=1000, horizon=0.1)
    assert plan.room(held=0, prefetch=prefetch) == 4  # no pace yet: nothing ahead
    prefetch.observe(0.01)  # depth 40, refill at 20
    assert plan.room(held=3, prefetch=prefetch) == 41


def test_with_every_handler_busy_the_room_is_claimed_only_once_it_reaches_the_refill_mark() -> None:
    plan = ClaimPlan(leases=LEASES, concurrency=4)
    prefetch = Prefetch(concurrency=4, limit=1000, horizon=0.1)
    prefetch.observe(0.01)  # depth 40, refill at 20
    assert plan.room(held=4 + 40 - 19, prefetch=prefetch) == 0
    assert plan.room(held=4 + 40 - 20, prefetch=prefetch) == 20
    assert plan.room(held=44, prefetch=prefetch) == 0


def test_without_claim_ahead_a_busy_worker_claims_each_freed_slot() -> None:
    plan = ClaimPlan(leases=LEASES, concurrency=2)
    prefetch = Prefetch(concurrency=2, limit=0)
    assert plan.room(held=2, prefetch=prefetch) == 0
    assert plan.room(held=1, prefetch=prefetch) == 1


def test_is_capped_names_the_capped_kinds_only() -> None:
    plan = ClaimPlan(leases=LEASES, caps={"a": 1})
    assert plan.is_capped("a")
    assert not plan.is_capped("b")
