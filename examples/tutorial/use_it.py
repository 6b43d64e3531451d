"""The tutorial's second half (docs/tutorial.md): enqueue, wait for results, run a chord.

    python use_it.py     # while `venturi worker --app tasks:app` runs

"""

from __future__ import annotations

from tasks import add, total, word_count

import venturi

ref = add.delay(2, 3)
print(f"add: job {ref.id} returned {ref.result(timeout=30)}")

flaky = word_count.delay("a flaky text of six words")
print(f"word_count: {flaky.result(timeout=30)} words, after a retry")

texts = ["the quick brown fox", "jumps over", "the lazy dog"]
counts = venturi.chord([word_count.s(text) for text in texts], total.s()).delay()
print(f"chord: {counts.result(timeout=30)} words in all")
