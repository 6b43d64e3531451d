-- Fair claims within a kind (ADR 0129). `fair_key` is the tenant (or any key)
-- a task's `fair_key=` function computed from the call's arguments at enqueue;
-- NULL for every job of a task that declares none. Appended after the other
-- columns, nullable without a default: adding it rewrites no row (SPEC 5.1).
ALTER TABLE {{prefix}}_jobs ADD COLUMN fair_key text;

-- The fair claim's only index, partial on `fair_key IS NOT NULL`: rows without
-- a key are never entered in it, so kinds that declare no fair_key keep their
-- write cost. Ordered (kind, priority, fair_key, visible_at) so that, within a
-- tier, one descent finds the next key after a given one and the soonest
-- visible job of that key (a skip scan over the keys, not over their rows), and
-- so that a key's eligible jobs are one range (`visible_at <= now()`), whatever
-- it holds for later. The seed's indexes stay exactly as they are.
CREATE INDEX {{prefix}}_jobs_fair
    ON {{prefix}}_jobs (kind, priority, fair_key, visible_at)
    WHERE status = 'pending' AND fair_key IS NOT NULL;

-- Where each fair kind's rotation stands: the key served last. The next claim
-- starts with the keys after it (wrapping around), so every key with eligible
-- work gets a turn before any key gets a second one. One row per fair kind,
-- created by its first claim.
CREATE TABLE {{prefix}}_fair_cursors (
    kind text PRIMARY KEY,
    fair_key text NOT NULL
);
