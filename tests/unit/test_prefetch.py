"""Claim-ahead depth: bounded by the limit and by what handlers start within the horizon."""

from __future__ import annotations

import pytest

from venturi.runtime.prefetch import Prefetch


def test_nothing_is_held_ahead_until_a_pace_is_known() -> None:
    prefetch = Prefetch(concurrency=8, limit=100, horizon=0.1)
    assert prefetch.depth() == 0
    assert prefetch.refill_at() == 1


def test_depth_is_what_the_handlers_start_within_the_horizon() -> None:
    prefetch = Prefetch(concurrency=4, limit=1000, horizon=0.1)
    prefetch.observe(0.01)  # 4 handlers x 0.1 s / 0.01 s per job
    assert prefetch.depth() == 40
    assert prefetch.refill_at() == 20


def test_tiny_jobs_are_held_up_to_the_limit_only() -> None:
    prefetch = Prefetch(concurrency=8, limit=64, horizon=0.1)
    prefetch.observe(0.00001)
    assert prefetch.depth() == 64
    prefetch.observe(-1.0)  # a clock step backwards counts as zero, never negative
    assert prefetch.depth() == 64


def test_jobs_longer_than_the_horizon_per_handler_are_never_held_ahead() -> None:
    prefetch = Prefetch(concurrency=8, limit=512, horizon=0.1)
    for _ in range(5):
        prefetch.observe(1.0)
    assert prefetch.depth() == 0


def test_a_zero_limit_disables_claim_ahead_whatever_the_pace() -> None:
    prefetch = Prefetch(concurrency=8, limit=0)
    prefetch.observe(0.0)
    assert prefetch.depth() == 0


def test_the_pace_follows_recent_jobs_not_the_first_one() -> None:
    prefetch = Prefetch(concurrency=1, limit=10_000, horizon=1.0)
    prefetch.observe(1.0)
    assert prefetch.depth() == 1
    for _ in range(200):
        prefetch.observe(0.001)
    assert prefetch.depth() == pytest.approx(1000, rel=0.01)
