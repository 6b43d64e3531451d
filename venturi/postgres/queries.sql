-- Every runtime statement of the PostgreSQL adapter. `{{prefix}}` is replaced
-- once, from a validated Prefix, when the file is loaded (queries.py); values are
-- always %(name)s parameters. Lifecycle times come from the database clock.
--
-- The statements are in sections by role, in the order of venturi/backend/; each
-- section names the adapter module whose verbs run its statements. A statement
-- another role runs too (notify_wakeup, database_now, end_dependants, ...) sits
-- with the role it belongs to.

-- =====================================================================================
-- Enqueue (enqueue.py): the inserts of every batch size, with and without trace
-- headers, the wake-up, dedup merges, and beat's reads by dedup key.
-- =====================================================================================

-- name: enqueue_jobs :exec
-- Bulk insert in one round trip (unnest of parallel arrays), wake-up included.
-- clock_timestamp() per row keeps FIFO order within a batch; immediate work is
-- visible from its enqueue time (ADR 12). The NOTIFY is delivered at commit, so a
-- rolled-back enqueue wakes nobody; identical notifications in one transaction
-- collapse into one. An expiry is a time, or an interval from the enqueue time
-- (ADR 0135); neither: NULL, never.
WITH input AS (
    SELECT i.*, clock_timestamp() AS enqueued_at
    FROM unnest(
        %(ids)s::text[], %(kinds)s::text[], %(payloads)s::text[], %(priorities)s::smallint[],
        %(delays)s::interval[], %(etas)s::timestamptz[], %(dedup_keys)s::text[],
        %(fair_keys)s::text[], %(expires_ins)s::interval[], %(expires_ats)s::timestamptz[]
    ) AS i(id, kind, payload, priority, delay, eta, dedup_key, fair_key, expires_in, expires_at)
), inserted AS (
    INSERT INTO {{prefix}}_jobs (id, kind, payload, priority, status, created_at, visible_at, dedup_key,
                                 fair_key, expires_at)
    SELECT id, kind, payload::jsonb, priority, 'pending', enqueued_at,
           coalesce(eta, enqueued_at + delay), dedup_key, fair_key,
           coalesce(expires_at, enqueued_at + expires_in)
    FROM input
    RETURNING 1
)
SELECT pg_notify(%(channel)s, '') FROM (SELECT count(*) FROM inserted) AS done

-- name: enqueue_job :exec
-- The single-job path of .delay(): plain parameters instead of one-element arrays,
-- which psycopg would dump element by element in Python. Same rows and wake-up as
-- enqueue_jobs. One flat INSERT ... SELECT: the one-row subquery is evaluated once
-- and never dropped (PostgreSQL keeps a subquery output that calls a volatile
-- function), and the NOTIFY waits for the commit as in enqueue_jobs. Closer to a
-- plain INSERT than a CTE that counts the inserted rows (ADR 0132, bench/README.md).
INSERT INTO {{prefix}}_jobs (id, kind, payload, priority, status, created_at, visible_at, dedup_key,
                             fair_key, expires_at)
SELECT %(id)s, %(kind)s, %(payload)s::jsonb, %(priority)s, 'pending', enqueued_at,
       coalesce(%(eta)s::timestamptz, enqueued_at + %(delay)s::interval), %(dedup_key)s,
       %(fair_key)s,
       coalesce(%(expires_at)s::timestamptz, enqueued_at + %(expires_in)s::interval)
FROM (SELECT clock_timestamp() AS enqueued_at, pg_notify(%(channel)s, '')) AS wake

-- name: enqueue_job_now :exec
-- enqueue_job for the common call (no delay, eta, dedup key, fair key, expiry or
-- headers: the adapter's _is_immediate): the same row and wake-up, with five
-- parameters instead of eleven, as the columns it leaves out take their defaults
-- (NULL) and visible_at is created_at (journal, section 16).
INSERT INTO {{prefix}}_jobs (id, kind, payload, priority, status, created_at, visible_at)
SELECT %(id)s, %(kind)s, %(payload)s::jsonb, %(priority)s, 'pending', enqueued_at, enqueued_at
FROM (SELECT clock_timestamp() AS enqueued_at, pg_notify(%(channel)s, '')) AS wake

-- name: copy_jobs :copy
-- Bulk path for large batches (the adapter's COPY_THRESHOLD and up), where COPY
-- beats the unnest insert (bench/README.md). The adapter sends created_at as the
-- database's clock_timestamp() read in the same transaction plus one microsecond
-- per row (FIFO within the batch, like enqueue_jobs), and visible_at as eta or
-- created_at + delay (ADR 12), and expires_at as given or created_at + the
-- interval (ADR 0135). Binary, since psycopg formats a binary row faster
-- than a text one (bench/README.md); the types in the adapter's _COPY_TYPES.
COPY {{prefix}}_jobs (id, kind, payload, priority, status, created_at, visible_at, dedup_key, fair_key,
                      expires_at)
FROM STDIN (FORMAT BINARY)

-- name: enqueue_job_with_headers :exec
-- enqueue_job with the trace headers of an instrumented enqueue (ADR 0127); a
-- statement of its own so the uninstrumented path sends nothing more.
INSERT INTO {{prefix}}_jobs (id, kind, payload, priority, status, created_at, visible_at, dedup_key,
                             headers, fair_key, expires_at)
SELECT %(id)s, %(kind)s, %(payload)s::jsonb, %(priority)s, 'pending', enqueued_at,
       coalesce(%(eta)s::timestamptz, enqueued_at + %(delay)s::interval), %(dedup_key)s,
       %(headers)s::jsonb, %(fair_key)s,
       coalesce(%(expires_at)s::timestamptz, enqueued_at + %(expires_in)s::interval)
FROM (SELECT clock_timestamp() AS enqueued_at, pg_notify(%(channel)s, '')) AS wake

-- name: enqueue_jobs_with_headers :exec
-- enqueue_jobs with the trace headers of an instrumented enqueue (ADR 0127).
WITH input AS (
    SELECT i.*, clock_timestamp() AS enqueued_at
    FROM unnest(
        %(ids)s::text[], %(kinds)s::text[], %(payloads)s::text[], %(priorities)s::smallint[],
        %(delays)s::interval[], %(etas)s::timestamptz[], %(dedup_keys)s::text[],
        %(headers)s::text[], %(fair_keys)s::text[], %(expires_ins)s::interval[],
        %(expires_ats)s::timestamptz[]
    ) AS i(id, kind, payload, priority, delay, eta, dedup_key, headers, fair_key, expires_in,
           expires_at)
), inserted AS (
    INSERT INTO {{prefix}}_jobs (id, kind, payload, priority, status, created_at, visible_at, dedup_key,
                                 headers, fair_key, expires_at)
    SELECT id, kind, payload::jsonb, priority, 'pending', enqueued_at,
           coalesce(eta, enqueued_at + delay), dedup_key, headers::jsonb, fair_key,
           coalesce(expires_at, enqueued_at + expires_in)
    FROM input
    RETURNING 1
)
SELECT pg_notify(%(channel)s, '') FROM (SELECT count(*) FROM inserted) AS done

-- name: copy_jobs_with_headers :copy
-- copy_jobs with the trace headers of an instrumented enqueue (ADR 0127).
COPY {{prefix}}_jobs (id, kind, payload, priority, status, created_at, visible_at, dedup_key, headers,
                      fair_key, expires_at)
FROM STDIN (FORMAT BINARY)

-- name: notify_wakeup :exec
SELECT pg_notify(%(channel)s, '')

-- name: ping :one
SELECT 1 AS alive

-- name: lock_dedup_key :exec
-- Serializes concurrent enqueues of one (kind, dedup_key) until commit (ADR 10).
SELECT pg_advisory_xact_lock(hashtextextended(%(lock_name)s, 0))

-- name: find_dedup_sibling :one
-- Oldest pending sibling, from _jobs_dedup without a sort; locked so a worker
-- cannot claim it while it is being merged into (SKIP LOCKED skips it).
SELECT id, payload, priority
FROM {{prefix}}_jobs
WHERE kind = %(kind)s AND dedup_key = %(dedup_key)s
  AND dedup_key IS NOT NULL AND status = 'pending'
ORDER BY created_at
LIMIT 1
FOR UPDATE

-- name: merge_into_sibling :exec
-- The survivor keeps id, created_at and (without a debounce) visible_at; it takes
-- the new payload (replace/combine) and the higher tier; the journal records the
-- merge (ADR 10).
-- Whatever the decision it takes the later of the two expiries, none (NULL, as
-- infinity here) being the latest, so the absorbed call is served for as long
-- as it asked (ADR 0135). With a debounce (ADR 0138; NULL: none) the survivor's
-- start moves to now + debounce instead, so a burst runs once, after it goes quiet.
WITH merged AS (
    UPDATE {{prefix}}_jobs
    SET payload = coalesce(%(payload)s::jsonb, payload),
        priority = least(priority, %(priority)s::smallint),
        visible_at = coalesce(clock_timestamp() + %(debounce)s::interval, visible_at),
        expires_at = nullif(greatest(
            coalesce(expires_at, 'infinity'),
            coalesce(%(expires_at)s::timestamptz, clock_timestamp() + %(expires_in)s::interval,
                     'infinity')
        ), 'infinity')
    WHERE id = %(id)s
    RETURNING id, kind, run_count
)
INSERT INTO {{prefix}}_journal (job_id, kind, run_no, recorded_at, outcome, note)
SELECT id, kind, run_count, now(), 'merged', %(note)s FROM merged

-- name: pending_with_dedup_prefix :many
-- Beat bookkeeping: its rows' dedup keys share a prefix. Rare (once per beat
-- iteration) and bounded by the number of schedules.
SELECT *
FROM {{prefix}}_jobs
WHERE status = 'pending' AND dedup_key IS NOT NULL
  AND starts_with(dedup_key, %(dedup_prefix)s)

-- name: latest_with_dedup_key :one
-- Every status is spelled out so _jobs_history (status, kind, finished_at) bounds
-- the read to this kind's rows; without it no index applies and the whole
-- table is scanned.
SELECT *
FROM {{prefix}}_jobs
WHERE kind = %(kind)s AND dedup_key = %(dedup_key)s
  AND status IN ('pending', 'claimed', 'completed', 'dead')
ORDER BY visible_at DESC
LIMIT 1

-- =====================================================================================
-- Claims (claims.py): plain, limited and fair claims, and priority aging.
-- =====================================================================================

-- name: claim_jobs :many
-- Highest tier, then oldest, among eligible rows; SKIP LOCKED so workers never
-- wait on each other or take the same row (ADR 3). One ordered probe of
-- _jobs_claim per served kind, so the kinds a worker does not serve (or has
-- capped, ADR 23) are never walked: `kind = ANY(...)` over the whole pending set
-- would filter kind on heap rows, costing the unserved kinds' eligible backlog
-- on every claim. Each probe locks at most LIMIT rows in index order; the merge
-- sorts at most kinds x LIMIT locked rows and keeps the first LIMIT (the others
-- are unlocked at commit). `kinds` must not repeat a kind. The kind test is
-- written as a closed range and kept in the ORDER BY on purpose: with `kind =`
-- the planner drops kind from the sort keys, and when its statistics see few
-- kinds it prefers _jobs_claim_priority with kind as a heap filter, walking other
-- kinds' backlog on every claim (tests/integration/test_claim_plan_few_kinds.py). A
-- kind's floor (ADR 0115; NULL: none) is a row comparison in the index
-- condition, where the scan starts, so it skips the future-visible rows before
-- it; `kind >= k.kind` stays beside it because without it the generic plan
-- reads _jobs_visible and sorts. The CTE bounds the UPDATE to the LIMIT.
-- run_count is the claim's fence (ADR 19). kind_limit bounds each probe: the
-- claim's LIMIT, or less for a kind limited across workers (ADR 0128). The
-- kinds come as one JSON array of objects, not four arrays: psycopg dumps
-- arrays element by element in Python (bench/README.md). is_expired: the row's
-- expiry is past, or comes before it is visible (a positive horizon), so the
-- worker ends it dead without running it (ADR 0135); computed on the claimed
-- rows only, so the scans are those of a claim without expiries. A paused kind
-- (ADR 0139) is left out before its probe: one primary-key probe of
-- _kind_controls per served kind, read by the claim itself, so no worker claims
-- a paused kind, whatever it cached while it was away.
WITH picked AS (
    SELECT c.id
    FROM json_to_recordset(%(kinds)s::json) AS k(
        kind text, floor_priority smallint, floor_created_at timestamptz, kind_limit int
    )
    CROSS JOIN LATERAL (
        SELECT NOT EXISTS (
            SELECT 1 FROM {{prefix}}_kind_controls AS s WHERE s.kind = k.kind AND s.paused
        ) AS is_active
    ) AS a
    CROSS JOIN LATERAL (
        SELECT id, priority, created_at
        FROM {{prefix}}_jobs
        WHERE status = 'pending'
          AND kind >= k.kind AND kind <= k.kind
          AND (kind, priority, created_at) >= (
              k.kind,
              coalesce(k.floor_priority, 0::smallint),
              coalesce(k.floor_created_at, '-infinity'::timestamptz)
          )
          AND visible_at <= now() + %(horizon)s
          AND a.is_active
        ORDER BY kind, priority, created_at
        LIMIT k.kind_limit
        FOR UPDATE SKIP LOCKED
    ) AS c
    ORDER BY c.priority, c.created_at
    LIMIT %(limit)s
)
UPDATE {{prefix}}_jobs AS j
SET status = 'claimed',
    claimed_by = %(worker_id)s,
    run_count = j.run_count + 1,
    claim_expires_at = now() + %(lease)s
FROM picked
WHERE j.id = picked.id
RETURNING j.id, j.kind, j.payload, j.carry, j.priority, j.failure_count, j.run_count,
          j.created_at, j.claim_expires_at, j.headers, j.workflow_id,
          j.expires_at IS NOT NULL AND j.expires_at <= greatest(j.visible_at, now()) AS is_expired

-- name: lock_claim_limits :exec
-- The first statement of a limited claim (ADR 0128): creates the limited kinds'
-- rows on first use and locks them until the claim commits, in kind order so two
-- claimers never deadlock. The next statement of the transaction takes a new
-- snapshot, so it sees every claim committed by the previous holder.
INSERT INTO {{prefix}}_claim_limits (kind)
SELECT kind FROM unnest(%(kinds)s::text[]) AS k(kind) ORDER BY kind
ON CONFLICT (kind) DO UPDATE SET kind = excluded.kind

-- name: claim_limit_state :many
-- The locked kinds' next start (never before now: tokens unused while idle do
-- not pile up past the burst) and, for the capped ones, their claimed rows (one
-- _jobs_history probe per capped kind, bounded by its cap), with the
-- transaction's clock, which the claim that follows shares.
SELECT l.kind, greatest(l.next_start_at, now()) AS next_start_at, now() AS now,
       CASE WHEN l.kind = ANY(%(capped)s::text[]) THEN (
           SELECT count(*) FROM {{prefix}}_jobs AS j
           WHERE j.status = 'claimed' AND j.kind = l.kind
       ) END AS claimed
FROM {{prefix}}_claim_limits AS l
WHERE l.kind = ANY(%(kinds)s::text[])

-- name: advance_rate_limits :exec
-- Spends the starts a limited claim took: each kind's next start moves on by one
-- interval per job claimed (computed by the adapter from claim_limit_state).
UPDATE {{prefix}}_claim_limits AS l
SET next_start_at = a.next_start_at
FROM unnest(%(kinds)s::text[], %(next_start_at)s::timestamptz[]) AS a(kind, next_start_at)
WHERE l.kind = a.kind

-- name: claim_fair_jobs :many
-- The claim of one kind that declares fair_key (ADR 0129): its keys take turns,
-- so one key's backlog never starves another key's job. Tiers stay strict (every
-- HIGH job of any key before NORMAL ones); within a tier the keys rotate from
-- the one after the kind's cursor (the key served last), wrapping around, and
-- within a key the soonest visible job goes first.
-- `rotation` is a skip scan of _jobs_fair (kind, priority, fair_key,
-- visible_at): each step is one descent that returns the next key of the tier
-- and its soonest visible_at, so a key costs one probe however many rows it
-- holds; the branches of the LATERAL are tried in order (same tier after the
-- previous key: up to the end before the wrap, up to the cursor after it; then
-- the tier's first key, wrapped; then the next tier that has keyed rows,
-- `tiers`, after the cursor or wrapped) and LIMIT 1 stops at the first that
-- finds a key. Each branch's bounds are index conditions, gated by `wrapped`:
-- a bound left as a filter would walk every row after the cursor at the wrap.
-- `turns` reads the recursion lazily: it stops after `limit` keys with a
-- visible job, so a claim costs O(limit) probes, not O(keys). Each turn's key is
-- then probed for its visible jobs (a range of the same index, nothing later is
-- walked), SKIP LOCKED, at most limit - turns + 1 of them (the most one key can
-- get when every other turn takes one); the jobs are taken by (tier, rank
-- within their key, turn), so with fewer keys than `limit` the keys share the
-- claim in turn, and the rows come back in that order. The cursor moves to the
-- key of the last job taken. run_count is the claim's fence (ADR 19), and
-- is_expired the expiry test (ADR 0135), as in claim_jobs. A paused kind (ADR
-- 0139) takes no turn: `turns` is gated on one primary-key probe of
-- _kind_controls, evaluated once, before the rotation is read.
WITH RECURSIVE after_key AS (
    SELECT coalesce(
        (SELECT c.fair_key FROM {{prefix}}_fair_cursors AS c WHERE c.kind = %(kind)s), ''
    ) AS fair_key
), tiers AS (
    SELECT t.tier
    FROM unnest(ARRAY[0, 1, 2]::smallint[]) AS t(tier)
    WHERE EXISTS (
        SELECT 1 FROM {{prefix}}_jobs
        WHERE status = 'pending' AND fair_key IS NOT NULL AND kind = %(kind)s AND priority = t.tier
    )
), rotation (step, tier, wrapped, fair_key, visible_at) AS (
    SELECT 0, -1::smallint, true, NULL::text, NULL::timestamptz
    UNION ALL
    SELECT p.step + 1, n.tier, n.wrapped, n.fair_key, n.visible_at
    FROM rotation AS p
    CROSS JOIN after_key AS a
    CROSS JOIN LATERAL (
        (SELECT p.tier AS tier, false AS wrapped, j.fair_key, j.visible_at
         FROM {{prefix}}_jobs AS j
         WHERE NOT p.wrapped
           AND j.status = 'pending' AND j.fair_key IS NOT NULL AND j.kind = %(kind)s
           AND j.priority = p.tier AND j.fair_key > p.fair_key
         ORDER BY j.fair_key, j.visible_at
         LIMIT 1)
        UNION ALL
        (SELECT p.tier, true, j.fair_key, j.visible_at
         FROM {{prefix}}_jobs AS j
         WHERE p.wrapped
           AND j.status = 'pending' AND j.fair_key IS NOT NULL AND j.kind = %(kind)s
           AND j.priority = p.tier AND j.fair_key > p.fair_key AND j.fair_key <= a.fair_key
         ORDER BY j.fair_key, j.visible_at
         LIMIT 1)
        UNION ALL
        (SELECT p.tier, true, j.fair_key, j.visible_at
         FROM {{prefix}}_jobs AS j
         WHERE NOT p.wrapped
           AND j.status = 'pending' AND j.fair_key IS NOT NULL AND j.kind = %(kind)s
           AND j.priority = p.tier AND j.fair_key <= a.fair_key
         ORDER BY j.fair_key, j.visible_at
         LIMIT 1)
        UNION ALL
        (SELECT nt.tier, false, j.fair_key, j.visible_at
         FROM (SELECT min(t.tier) AS tier FROM tiers AS t WHERE t.tier > p.tier) AS nt
         CROSS JOIN LATERAL (
             SELECT j.fair_key, j.visible_at
             FROM {{prefix}}_jobs AS j
             WHERE j.status = 'pending' AND j.fair_key IS NOT NULL AND j.kind = %(kind)s
               AND j.priority = nt.tier AND j.fair_key > a.fair_key
             ORDER BY j.fair_key, j.visible_at
             LIMIT 1
         ) AS j)
        UNION ALL
        (SELECT nt.tier, true, j.fair_key, j.visible_at
         FROM (SELECT min(t.tier) AS tier FROM tiers AS t WHERE t.tier > p.tier) AS nt
         CROSS JOIN LATERAL (
             SELECT j.fair_key, j.visible_at
             FROM {{prefix}}_jobs AS j
             WHERE j.status = 'pending' AND j.fair_key IS NOT NULL AND j.kind = %(kind)s
               AND j.priority = nt.tier AND j.fair_key <= a.fair_key
             ORDER BY j.fair_key, j.visible_at
             LIMIT 1
         ) AS j)
        LIMIT 1
    ) AS n
), turns AS (
    SELECT r.step, r.tier, r.fair_key
    FROM rotation AS r
    WHERE r.step > 0 AND r.visible_at <= now() + %(horizon)s
      AND NOT EXISTS (
          SELECT 1 FROM {{prefix}}_kind_controls AS s WHERE s.kind = %(kind)s AND s.paused
      )
    LIMIT %(limit)s
), picked AS (
    SELECT c.id, c.fair_key, t.tier, t.step,
           row_number() OVER (PARTITION BY t.step ORDER BY c.visible_at) AS rank
    FROM turns AS t
    CROSS JOIN LATERAL (
        SELECT j.id, j.fair_key, j.visible_at
        FROM {{prefix}}_jobs AS j
        WHERE j.status = 'pending' AND j.fair_key IS NOT NULL AND j.kind = %(kind)s
          AND j.priority = t.tier AND j.fair_key = t.fair_key
          AND j.visible_at <= now() + %(horizon)s
        ORDER BY j.visible_at
        LIMIT %(limit)s + 1 - (SELECT count(*) FROM turns)
        FOR UPDATE SKIP LOCKED
    ) AS c
), chosen AS (
    SELECT p.id, p.fair_key, p.tier, p.rank, p.step
    FROM picked AS p
    ORDER BY p.tier, p.rank, p.step
    LIMIT %(limit)s
), claimed AS (
    UPDATE {{prefix}}_jobs AS j
    SET status = 'claimed',
        claimed_by = %(worker_id)s,
        run_count = j.run_count + 1,
        claim_expires_at = now() + %(lease)s
    FROM chosen
    WHERE j.id = chosen.id
    RETURNING j.id, j.kind, j.payload, j.carry, j.priority, j.failure_count, j.run_count,
              j.created_at, j.claim_expires_at, j.headers, j.workflow_id, j.fair_key,
              chosen.tier, chosen.rank, chosen.step,
              j.expires_at IS NOT NULL
                  AND j.expires_at <= greatest(j.visible_at, now()) AS is_expired
), moved AS (
    INSERT INTO {{prefix}}_fair_cursors AS f (kind, fair_key)
    SELECT %(kind)s, c.fair_key
    FROM claimed AS c
    ORDER BY c.tier DESC, c.rank DESC, c.step DESC
    LIMIT 1
    ON CONFLICT (kind) DO UPDATE SET fair_key = excluded.fair_key
)
SELECT id, kind, payload, carry, priority, failure_count, run_count, created_at,
       claim_expires_at, headers, workflow_id, is_expired
FROM claimed
ORDER BY tier, rank, step

-- name: claim_keyed_jobs :many
-- The claim of one kind with a per-key cap or a per-key rate (ADR 0138), run
-- inside a limited claim's transaction after lock_claim_limits locked the kind's
-- row, so the claims of the kind are serialized and this statement's snapshot
-- sees every claim committed before it. The key is stored in fair_key (a keyed
-- kind declares no fair_key). A key's slots are its claimed rows (`held`: one
-- _jobs_history probe, bounded by the jobs claimed across the fleet), so every
-- end of a claim frees its slot with no write here. The keys are walked as in
-- claim_fair_jobs (a skip scan of _jobs_fair in rotation from the kind's cursor,
-- tiers strict), and a key with no room (at its cap, or out of its rate's
-- starts: `_key_rates`) is passed over, so a busy key never holds up the next
-- one; the walk is lazy and stops after `limit` keys with room, so it costs
-- O(limit + busy keys) probes whatever the backlog. Each key gives at most its
-- room, soonest visible first (its claim order: tier, then visible_at), and the
-- jobs are taken by (tier, rank within the key, turn). per_key NULL: no cap;
-- rate_interval NULL: no per-key rate. The rows come back with their key, for
-- advance_key_rates. run_count is the fence (ADR 19), is_expired as in claim_jobs.
-- A paused kind (ADR 0139) takes no turn, as in claim_fair_jobs.
WITH RECURSIVE after_key AS (
    SELECT coalesce(
        (SELECT c.fair_key FROM {{prefix}}_fair_cursors AS c WHERE c.kind = %(kind)s), ''
    ) AS fair_key
), held AS MATERIALIZED (
    SELECT j.fair_key, count(*)::int AS running
    FROM {{prefix}}_jobs AS j
    WHERE j.status = 'claimed' AND j.kind = %(kind)s AND j.fair_key IS NOT NULL
    GROUP BY j.fair_key
), tiers AS (
    SELECT t.tier
    FROM unnest(ARRAY[0, 1, 2]::smallint[]) AS t(tier)
    WHERE EXISTS (
        SELECT 1 FROM {{prefix}}_jobs
        WHERE status = 'pending' AND fair_key IS NOT NULL AND kind = %(kind)s AND priority = t.tier
    )
), rotation (step, tier, wrapped, fair_key, visible_at) AS (
    SELECT 0, -1::smallint, true, NULL::text, NULL::timestamptz
    UNION ALL
    SELECT p.step + 1, n.tier, n.wrapped, n.fair_key, n.visible_at
    FROM rotation AS p
    CROSS JOIN after_key AS a
    CROSS JOIN LATERAL (
        (SELECT p.tier AS tier, false AS wrapped, j.fair_key, j.visible_at
         FROM {{prefix}}_jobs AS j
         WHERE NOT p.wrapped
           AND j.status = 'pending' AND j.fair_key IS NOT NULL AND j.kind = %(kind)s
           AND j.priority = p.tier AND j.fair_key > p.fair_key
         ORDER BY j.fair_key, j.visible_at
         LIMIT 1)
        UNION ALL
        (SELECT p.tier, true, j.fair_key, j.visible_at
         FROM {{prefix}}_jobs AS j
         WHERE p.wrapped
           AND j.status = 'pending' AND j.fair_key IS NOT NULL AND j.kind = %(kind)s
           AND j.priority = p.tier AND j.fair_key > p.fair_key AND j.fair_key <= a.fair_key
         ORDER BY j.fair_key, j.visible_at
         LIMIT 1)
        UNION ALL
        (SELECT p.tier, true, j.fair_key, j.visible_at
         FROM {{prefix}}_jobs AS j
         WHERE NOT p.wrapped
           AND j.status = 'pending' AND j.fair_key IS NOT NULL AND j.kind = %(kind)s
           AND j.priority = p.tier AND j.fair_key <= a.fair_key
         ORDER BY j.fair_key, j.visible_at
         LIMIT 1)
        UNION ALL
        (SELECT nt.tier, false, j.fair_key, j.visible_at
         FROM (SELECT min(t.tier) AS tier FROM tiers AS t WHERE t.tier > p.tier) AS nt
         CROSS JOIN LATERAL (
             SELECT j.fair_key, j.visible_at
             FROM {{prefix}}_jobs AS j
             WHERE j.status = 'pending' AND j.fair_key IS NOT NULL AND j.kind = %(kind)s
               AND j.priority = nt.tier AND j.fair_key > a.fair_key
             ORDER BY j.fair_key, j.visible_at
             LIMIT 1
         ) AS j)
        UNION ALL
        (SELECT nt.tier, true, j.fair_key, j.visible_at
         FROM (SELECT min(t.tier) AS tier FROM tiers AS t WHERE t.tier > p.tier) AS nt
         CROSS JOIN LATERAL (
             SELECT j.fair_key, j.visible_at
             FROM {{prefix}}_jobs AS j
             WHERE j.status = 'pending' AND j.fair_key IS NOT NULL AND j.kind = %(kind)s
               AND j.priority = nt.tier AND j.fair_key <= a.fair_key
             ORDER BY j.fair_key, j.visible_at
             LIMIT 1
         ) AS j)
        LIMIT 1
    ) AS n
), turns AS (
    SELECT r.step, r.tier, r.fair_key, room.room
    FROM rotation AS r
    CROSS JOIN LATERAL (
        SELECT least(
            %(limit)s::int,
            %(per_key)s::int - coalesce(
                (SELECT h.running FROM held AS h WHERE h.fair_key = r.fair_key), 0
            ),
            CASE WHEN %(rate_interval)s::interval IS NOT NULL THEN coalesce(
                (SELECT floor(
                     extract(epoch FROM now() + %(rate_burst)s::int * %(rate_interval)s::interval
                                        - greatest(k.next_start_at, now()))
                     / extract(epoch FROM %(rate_interval)s::interval)
                 )::int
                 FROM {{prefix}}_key_rates AS k
                 WHERE k.kind = %(kind)s AND k.key = r.fair_key),
                %(rate_burst)s::int
            ) END
        ) AS room
    ) AS room
    WHERE r.step > 0 AND r.visible_at <= now() + %(horizon)s AND room.room > 0
      AND NOT EXISTS (
          SELECT 1 FROM {{prefix}}_kind_controls AS s WHERE s.kind = %(kind)s AND s.paused
      )
    LIMIT %(limit)s
), picked AS (
    SELECT c.id, c.fair_key, t.tier, t.step, t.room,
           row_number() OVER (PARTITION BY t.step ORDER BY c.visible_at) AS rank
    FROM turns AS t
    CROSS JOIN LATERAL (
        SELECT j.id, j.fair_key, j.visible_at
        FROM {{prefix}}_jobs AS j
        WHERE j.status = 'pending' AND j.fair_key IS NOT NULL AND j.kind = %(kind)s
          AND j.priority = t.tier AND j.fair_key = t.fair_key
          AND j.visible_at <= now() + %(horizon)s
        ORDER BY j.visible_at
        LIMIT least(t.room, %(limit)s + 1 - (SELECT count(*) FROM turns))
        FOR UPDATE SKIP LOCKED
    ) AS c
), chosen AS (
    SELECT r.id, r.fair_key, r.tier, r.rank, r.step
    FROM (
        SELECT p.*, row_number() OVER (PARTITION BY p.fair_key ORDER BY p.tier, p.rank) AS nth
        FROM picked AS p
    ) AS r
    WHERE r.nth <= r.room
    ORDER BY r.tier, r.rank, r.step
    LIMIT %(limit)s
), claimed AS (
    UPDATE {{prefix}}_jobs AS j
    SET status = 'claimed',
        claimed_by = %(worker_id)s,
        run_count = j.run_count + 1,
        claim_expires_at = now() + %(lease)s
    FROM chosen
    WHERE j.id = chosen.id
    RETURNING j.id, j.kind, j.payload, j.carry, j.priority, j.failure_count, j.run_count,
              j.created_at, j.claim_expires_at, j.headers, j.workflow_id, j.fair_key,
              chosen.tier, chosen.rank, chosen.step,
              j.expires_at IS NOT NULL
                  AND j.expires_at <= greatest(j.visible_at, now()) AS is_expired
), moved AS (
    INSERT INTO {{prefix}}_fair_cursors AS f (kind, fair_key)
    SELECT %(kind)s, c.fair_key
    FROM claimed AS c
    ORDER BY c.tier DESC, c.rank DESC, c.step DESC
    LIMIT 1
    ON CONFLICT (kind) DO UPDATE SET fair_key = excluded.fair_key
)
SELECT id, kind, payload, carry, priority, failure_count, run_count, created_at,
       claim_expires_at, headers, workflow_id, is_expired, fair_key
FROM claimed
ORDER BY tier, rank, step

-- name: advance_key_rates :exec
-- Spends the starts a keyed claim took from each key's rate (ADR 0138): the key's
-- next start moves on by one interval per job claimed, from now when it lagged
-- (idle time banks no starts beyond the burst). Under the kind's claim lock.
INSERT INTO {{prefix}}_key_rates AS k (kind, key, next_start_at)
SELECT %(kind)s, a.key, now() + a.taken * %(rate_interval)s::interval
FROM unnest(%(keys)s::text[], %(taken)s::int[]) AS a(key, taken)
ON CONFLICT (kind, key) DO UPDATE
SET next_start_at = greatest(k.next_start_at, now())
                    + (excluded.next_start_at - now())

-- name: lock_shared_limits :exec
-- A limited claim's second lock (ADR 0138), after lock_claim_limits: the shared
-- limits its kinds count against, created on first use, locked in name order
-- until the claim commits, so the claims of every kind sharing one are serialized.
INSERT INTO {{prefix}}_shared_limits (name)
SELECT name FROM unnest(%(names)s::text[]) AS n(name) ORDER BY name
ON CONFLICT (name) DO UPDATE SET name = excluded.name

-- name: shared_limit_state :many
-- Each locked shared limit's next start (never before now) and the claimed rows
-- of its kinds (one _jobs_history probe per kind; the kinds come as one JSON
-- object per limit), with the claim's clock.
SELECT l.name, greatest(l.next_start_at, now()) AS next_start_at, now() AS now,
       (SELECT count(*) FROM {{prefix}}_jobs AS j
        WHERE j.status = 'claimed' AND j.kind = ANY(s.kinds)) AS claimed
FROM json_to_recordset(%(limits)s::json) AS s(name text, kinds text[])
JOIN {{prefix}}_shared_limits AS l ON l.name = s.name

-- name: advance_shared_limits :exec
-- Spends the starts a limited claim took from the shared limits with a rate.
UPDATE {{prefix}}_shared_limits AS l
SET next_start_at = a.next_start_at
FROM unnest(%(names)s::text[], %(next_start_at)s::timestamptz[]) AS a(name, next_start_at)
WHERE l.name = a.name

-- name: promote_waiting :one
-- Priority aging (App(age_after=)): a pending job visible for age_after or
-- longer is promoted to HIGH, where its age puts it ahead of newer HIGH work.
-- One _jobs_visible range probe per kind, in no particular order (every row
-- found is due, and the next step takes the rest of a large batch); only rows
-- visible that long are read (`priority + 0` keeps the tier out of the index
-- conditions, which would otherwise walk every NORMAL and LOW row of the kind in
-- _jobs_claim); the rows are then changed by primary key. SKIP LOCKED: a row
-- being claimed is not waited for.
WITH aged AS (
    SELECT a.id
    FROM unnest(%(kinds)s::text[]) AS k(kind)
    CROSS JOIN LATERAL (
        SELECT id
        FROM {{prefix}}_jobs
        WHERE status = 'pending' AND kind = k.kind
          AND visible_at <= now() - %(age_after)s::interval
          AND priority + 0 > 0
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    ) AS a
), promoted AS (
    UPDATE {{prefix}}_jobs AS j
    SET priority = 0
    WHERE j.id = ANY(ARRAY(SELECT id FROM aged))
    RETURNING 1
)
SELECT count(*) AS promoted FROM promoted

-- =====================================================================================
-- Leases (leases.py): what happens to a claimed row, each statement fenced on its
-- claim.
-- =====================================================================================

-- name: finish_jobs :many :replan
-- Many outcomes in one statement: each row change is fenced on its claim
-- (status, claimed_by, run_count; ADR 19) and each change writes its journal
-- entry in the same statement (ADR 11, 16). Lost claims simply match nothing.
-- Here, in finish_jobs_in_workflows, renew_leases and release_jobs, the rows are
-- found by `id = ANY(ids)` (primary-key probes), and the row's own tests (status;
-- here also workflow_id) are written as join clauses, `(test OR j.id <> i.id)`,
-- whose second half is false for the row joined. As restrictions on _jobs they
-- could drive the scan (with `status = 'claimed'` the planner, whenever its
-- statistics saw few claims, drove the join from _jobs_history, walking every
-- claimed row version, dead ones too, until VACUUM), and their unknown selectivity
-- (0.005 each, kept out of the index by `status || ''`) made it expect about one
-- row and rescan the whole input for each row found: quadratic in the batch (ADR
-- 0132, bench/README.md). Without `id = ANY` it read the whole table. :replan
-- because the generic plan of `id = ANY($1)` is a sequential scan testing each row
-- against the whole array (tests/integration/test_fenced_plans_with_stale_statistics.py).
-- A job whose cancellation was requested never becomes pending again: a paused
-- or retried outcome of it is recorded dead, note `cancelled (...)` (ADR 0121).
-- A paused run during which an event was sent to the job (woken_run, V12, ADR
-- 0137) leaves it visible now: its handler may have missed the event.
-- The traceback of a failed run goes with its journal entry (V5).
-- A completed run's result goes on its row (V6, ADR 0124). A row someone waits
-- for (result_awaited) that ends sends one NOTIFY on its own channel, at commit;
-- the flag is read from the row being updated anyway, so a drain nobody waits
-- on sends nothing and costs nothing more.
-- A row in a workflow (V9) is left alone here (it matches nothing, as a lost
-- claim does): finish_jobs_in_workflows records it with its hand-on, so the
-- finish of plain jobs stays this statement, planned and run as before.
-- The outcomes come as one JSON array of objects (a JSON null is NULL), the
-- ids once more as an array for the probes: psycopg would dump twelve arrays
-- element by element in Python (bench/README.md).
WITH input AS (
    SELECT *
    FROM json_to_recordset(%(input)s::json) AS i(
        id text, claimed_by text, run_count int, outcome text, note text, is_failure bool,
        delay_us bigint, eta timestamptz, carry text, attachment text, traceback text, result text
    )
), finished AS (
    UPDATE {{prefix}}_jobs AS j
    SET status = CASE WHEN i.outcome IN ('completed', 'dead') THEN i.outcome
                      WHEN j.cancel_requested_at IS NOT NULL THEN 'dead'
                      ELSE 'pending' END,
        finished_at = CASE WHEN i.outcome IN ('completed', 'dead')
                             OR j.cancel_requested_at IS NOT NULL THEN now() END,
        visible_at = CASE WHEN i.outcome IN ('completed', 'dead')
                            OR j.cancel_requested_at IS NOT NULL THEN j.visible_at
                          WHEN i.outcome = 'paused' AND j.woken_run = j.run_count THEN now()
                          ELSE coalesce(i.eta, now() + i.delay_us * interval '1 microsecond') END,
        failure_count = j.failure_count + i.is_failure::int,
        carry = coalesce(i.carry::jsonb, j.carry),
        result = CASE WHEN i.outcome = 'completed' THEN i.result::jsonb END,
        claimed_by = NULL,
        claim_expires_at = NULL
    FROM input AS i
    WHERE j.id = ANY(%(ids)s::text[]) AND j.id = i.id
      AND j.claimed_by = i.claimed_by AND j.run_count = i.run_count
      AND (j.status = 'claimed' AND j.workflow_id IS NULL OR j.id <> i.id)
    RETURNING j.id, j.kind, j.run_count,
              j.cancel_requested_at IS NOT NULL
                  AND i.outcome NOT IN ('completed', 'dead') AS is_cancelled,
              j.result_awaited AND j.finished_at IS NOT NULL AS wakes_waiter
), journaled AS (
    INSERT INTO {{prefix}}_journal (job_id, kind, run_no, recorded_at, outcome, note, attachment,
                                    traceback)
    SELECT f.id, f.kind, f.run_count, now(),
           CASE WHEN f.is_cancelled THEN 'dead' ELSE i.outcome END,
           CASE WHEN f.is_cancelled
                THEN 'cancelled (the run ended ' || i.outcome || coalesce(': ' || i.note, '') || ')'
                ELSE i.note END,
           i.attachment::jsonb, i.traceback
    FROM finished AS f JOIN input AS i ON i.id = f.id
)
SELECT f.id AS job_id,
       CASE WHEN f.wakes_waiter THEN pg_notify(%(result_channel)s || f.id, '') END AS woken
FROM finished AS f

-- name: finish_jobs_in_workflows :many :replan
-- finish_jobs for a batch with rows in workflows (the backend picks it from the
-- claims; a row finish_jobs left alone comes here too), same fence, journal,
-- results and wake-ups, :replan for the same reason. Its input, fenced update and
-- journal entry are finish_jobs's text, held equal by tests/unit/test_query_file.py;
-- only the update's row test admits workflow rows and it returns two more columns.
-- Workflows (V9, ADR 0125): a finished row with a workflow_id hands on to its
-- children in this same statement, so a crash leaves either the parent claimed
-- and its children waiting, or both recorded. A completed parent writes its
-- result on its edges and counts each child (a _steps row) down; a child
-- reaching 0 is inserted into _jobs, pending, with its inputs (the parents'
-- results, from the edges), and its step marked enqueued; a parent ending dead
-- ends its waiting descendants dead. The children are locked in id order first,
-- so two finishes never deadlock, and the lock returns their newest count. Plain
-- rows of the batch (workflow_id NULL) feed nothing into these steps: each is an
-- index probe with an empty array or a loop over no step, and the wake-up
-- initplan is not evaluated.
WITH RECURSIVE input AS (
    SELECT *
    FROM json_to_recordset(%(input)s::json) AS i(
        id text, claimed_by text, run_count int, outcome text, note text, is_failure bool,
        delay_us bigint, eta timestamptz, carry text, attachment text, traceback text, result text
    )
), finished AS (
    UPDATE {{prefix}}_jobs AS j
    SET status = CASE WHEN i.outcome IN ('completed', 'dead') THEN i.outcome
                      WHEN j.cancel_requested_at IS NOT NULL THEN 'dead'
                      ELSE 'pending' END,
        finished_at = CASE WHEN i.outcome IN ('completed', 'dead')
                             OR j.cancel_requested_at IS NOT NULL THEN now() END,
        visible_at = CASE WHEN i.outcome IN ('completed', 'dead')
                            OR j.cancel_requested_at IS NOT NULL THEN j.visible_at
                          WHEN i.outcome = 'paused' AND j.woken_run = j.run_count THEN now()
                          ELSE coalesce(i.eta, now() + i.delay_us * interval '1 microsecond') END,
        failure_count = j.failure_count + i.is_failure::int,
        carry = coalesce(i.carry::jsonb, j.carry),
        result = CASE WHEN i.outcome = 'completed' THEN i.result::jsonb END,
        claimed_by = NULL,
        claim_expires_at = NULL
    FROM input AS i
    WHERE j.id = ANY(%(ids)s::text[]) AND j.id = i.id
      AND j.claimed_by = i.claimed_by AND j.run_count = i.run_count
      AND (j.status = 'claimed' OR j.id <> i.id)
    RETURNING j.id, j.kind, j.run_count,
              j.cancel_requested_at IS NOT NULL
                  AND i.outcome NOT IN ('completed', 'dead') AS is_cancelled,
              j.result_awaited AND j.finished_at IS NOT NULL AS wakes_waiter,
              j.workflow_id, j.status AS ended
), journaled AS (
    INSERT INTO {{prefix}}_journal (job_id, kind, run_no, recorded_at, outcome, note, attachment,
                                    traceback)
    SELECT f.id, f.kind, f.run_count, now(),
           CASE WHEN f.is_cancelled THEN 'dead' ELSE i.outcome END,
           CASE WHEN f.is_cancelled
                THEN 'cancelled (the run ended ' || i.outcome || coalesce(': ' || i.note, '') || ')'
                ELSE i.note END,
           i.attachment::jsonb, i.traceback
    FROM finished AS f JOIN input AS i ON i.id = f.id
), completed_steps AS (
    SELECT f.id, coalesce(i.result::jsonb, 'null'::jsonb) AS result
    FROM finished AS f JOIN input AS i ON i.id = f.id
    WHERE f.workflow_id IS NOT NULL AND f.ended = 'completed'
), dead_steps AS (
    SELECT f.id, f.kind FROM finished AS f WHERE f.workflow_id IS NOT NULL AND f.ended = 'dead'
), handed AS (
    -- One primary-key probe per completed step (so too for dead steps in doomed,
    -- and in all_inputs). With the id array as an index condition beside
    -- `e.parent_id = c.id`, each probe re-read the whole array (the planner's
    -- choice at an estimated 100 steps), and at an exact estimate a join filter
    -- rescanned every pair (ADR 0132, round four).
    UPDATE {{prefix}}_edges AS e
    SET result = c.result
    FROM completed_steps AS c
    WHERE e.parent_id = c.id
), counted AS (
    SELECT e.child_id, count(*)::int AS parents
    FROM {{prefix}}_edges AS e
    WHERE e.parent_id = ANY(ARRAY(SELECT id FROM completed_steps))
    GROUP BY e.child_id
), doomed(id, cause_id, cause_kind) AS (
    SELECT e.child_id, d.id, d.kind
    FROM {{prefix}}_edges AS e JOIN dead_steps AS d ON d.id = e.parent_id
    UNION
    SELECT e.child_id, x.cause_id, x.cause_kind
    FROM doomed AS x JOIN {{prefix}}_edges AS e ON e.parent_id = x.id
), locked AS (
    SELECT c.*
    FROM {{prefix}}_steps AS c
    WHERE c.id = ANY(ARRAY(SELECT child_id FROM counted UNION SELECT id FROM doomed))
      AND c.status <> 'enqueued'
    ORDER BY c.id
    FOR UPDATE
), step_plan AS (
    SELECT l.*, d.cause_id, d.cause_kind,
           l.waiting_for - coalesce(n.parents, 0) AS left_to_wait,
           CASE WHEN l.status <> 'waiting' THEN NULL
                WHEN d.cause_id IS NOT NULL THEN 'dead'
                WHEN l.waiting_for - coalesce(n.parents, 0) = 0 THEN 'ready' END AS becomes
    FROM locked AS l
    LEFT JOIN counted AS n ON n.child_id = l.id
    LEFT JOIN (SELECT DISTINCT ON (id) * FROM doomed ORDER BY id, cause_id) AS d ON d.id = l.id
), step_inputs AS (
    -- Every parent of a ready child has committed (each counted the child down
    -- under its lock, which this statement now holds); FOR SHARE reads the edge
    -- versions committed after this statement's snapshot too. This statement's
    -- own parents are taken from completed_steps.
    SELECT e.child_id, e.position, e.result
    FROM {{prefix}}_edges AS e
    WHERE e.child_id = ANY(ARRAY(SELECT id FROM step_plan WHERE becomes = 'ready'))
      AND e.parent_id <> ALL(ARRAY(SELECT id FROM completed_steps))
    FOR SHARE
), all_inputs AS (
    SELECT child_id, position, result FROM step_inputs
    UNION ALL
    SELECT e.child_id, e.position, c.result
    FROM {{prefix}}_edges AS e JOIN completed_steps AS c ON c.id = e.parent_id
    WHERE e.child_id = ANY(ARRAY(SELECT id FROM step_plan WHERE becomes = 'ready'))
), released AS (
    INSERT INTO {{prefix}}_jobs (id, kind, payload, priority, status, created_at, visible_at,
                                 workflow_id, result_awaited)
    SELECT p.id, p.kind,
           CASE WHEN p.input_arg IS NULL THEN p.payload
                ELSE p.payload || jsonb_build_object(p.input_arg, (
                    SELECT CASE WHEN p.input_all THEN jsonb_agg(x.result ORDER BY x.position)
                                ELSE min(x.result::text)::jsonb END
                    FROM all_inputs AS x WHERE x.child_id = p.id)) END,
           p.priority, 'pending', clock_timestamp(), now(), p.workflow_id, p.result_awaited
    FROM step_plan AS p
    WHERE p.becomes = 'ready'
    RETURNING 1
), counted_down AS (
    UPDATE {{prefix}}_steps AS c
    SET waiting_for = p.left_to_wait,
        status = CASE p.becomes WHEN 'ready' THEN 'enqueued' WHEN 'dead' THEN 'dead'
                                ELSE c.status END,
        note = CASE WHEN p.becomes = 'dead'
                    THEN 'dependency ' || p.cause_id || ' (' || p.cause_kind || ') ended dead'
                    ELSE c.note END,
        finished_at = CASE WHEN p.becomes = 'dead' THEN now() ELSE c.finished_at END
    FROM step_plan AS p
    WHERE c.id = p.id
    RETURNING c.id, c.result_awaited, p.becomes
)
SELECT f.id AS job_id,
       CASE WHEN f.wakes_waiter THEN pg_notify(%(result_channel)s || f.id, '') END AS woken,
       (SELECT count(pg_notify(w.channel, '')) FROM (
            SELECT DISTINCT %(channel)s::text AS channel FROM released
            UNION ALL
            SELECT %(result_channel)s || id FROM counted_down
            WHERE becomes = 'dead' AND result_awaited
        ) AS w) AS stepped
FROM finished AS f

-- name: renew_leases :many :replan
-- Heartbeat for running handlers, fenced so a lost claim is not revived (ADR 19).
-- It also tells the worker which of its claims an operator asked to cancel, in
-- the round trip it makes anyway (ADR 0121).
UPDATE {{prefix}}_jobs AS j
SET claim_expires_at = now() + %(lease)s
FROM unnest(%(ids)s::text[], %(claimed_by)s::text[], %(run_counts)s::int[])
    AS c(id, claimed_by, run_count)
WHERE j.id = ANY(%(ids)s::text[]) AND j.id = c.id
  AND j.claimed_by = c.claimed_by AND j.run_count = c.run_count
  AND (j.status = 'claimed' OR j.id <> c.id)
RETURNING j.id, j.cancel_requested_at IS NOT NULL AS is_cancel_requested

-- name: release_jobs :many :replan
-- Graceful shutdown (ADR 21): back to pending, no failure counted, visible_at
-- untouched so the job keeps its place; fenced so a claim already lost is skipped.
-- A job whose cancellation was requested goes dead instead (ADR 0121).
WITH released AS (
    UPDATE {{prefix}}_jobs AS j
    SET status = CASE WHEN j.cancel_requested_at IS NULL THEN 'pending' ELSE 'dead' END,
        finished_at = CASE WHEN j.cancel_requested_at IS NOT NULL THEN now() END,
        claimed_by = NULL,
        claim_expires_at = NULL
    FROM unnest(%(ids)s::text[], %(claimed_by)s::text[], %(run_counts)s::int[])
        AS c(id, claimed_by, run_count)
    WHERE j.id = ANY(%(ids)s::text[]) AND j.id = c.id
      AND j.claimed_by = c.claimed_by AND j.run_count = c.run_count
      AND (j.status = 'claimed' OR j.id <> c.id)
    RETURNING j.id, j.kind, j.run_count, j.cancel_requested_at IS NOT NULL AS is_cancelled
)
INSERT INTO {{prefix}}_journal (job_id, kind, run_no, recorded_at, outcome, note)
SELECT id, kind, run_count, now(),
       CASE WHEN is_cancelled THEN 'dead' ELSE 'released' END,
       CASE WHEN is_cancelled THEN 'cancelled (' || %(note)s || ')' ELSE %(note)s END
FROM released
RETURNING job_id

-- name: recover_stale :many
-- Expired leases (ADR 19), oldest expiry first through _jobs_lease; SKIP LOCKED
-- so every worker can sweep at once. A recovery is a failure: at the kind's
-- backstop the row goes dead instead of back to pending, and so does a job
-- whose cancellation was requested (ADR 0121). The backstop is a
-- per-row lookup, not a join, so expired rows stream from _jobs_lease in expiry
-- order straight into the lock (a hash join would need a sort).
WITH limits AS (
    SELECT * FROM unnest(%(kinds)s::text[], %(max_failures)s::int[]) AS l(kind, max_failures)
), expired AS (
    SELECT j.id, j.claimed_by AS previous_owner,
           j.cancel_requested_at IS NOT NULL AS is_cancelled,
           j.failure_count + 1 >= coalesce(
               (SELECT l.max_failures FROM limits AS l WHERE l.kind = j.kind),
               %(default_max_failures)s) AS is_backstop
    FROM {{prefix}}_jobs AS j
    WHERE j.status = 'claimed' AND j.claim_expires_at < now()
    ORDER BY j.claim_expires_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), recovered AS (
    UPDATE {{prefix}}_jobs AS j
    SET status = CASE WHEN e.is_backstop OR e.is_cancelled THEN 'dead' ELSE 'pending' END,
        finished_at = CASE WHEN e.is_backstop OR e.is_cancelled THEN now() END,
        failure_count = j.failure_count + 1,
        claimed_by = NULL,
        claim_expires_at = NULL
    FROM expired AS e
    WHERE j.id = e.id
    RETURNING j.id, j.kind, j.run_count, e.is_backstop, e.is_cancelled, e.previous_owner,
              j.workflow_id
), entry AS (
    INSERT INTO {{prefix}}_journal (job_id, kind, run_no, recorded_at, outcome, note)
    SELECT id, kind, run_count, now(),
           CASE WHEN is_backstop OR is_cancelled THEN 'dead' ELSE 'stale-recovered' END,
           CASE WHEN is_cancelled THEN 'cancelled (lease of ' || previous_owner || ' expired)'
                WHEN is_backstop
                THEN 'lease of ' || previous_owner || ' expired; max_failures reached'
                ELSE 'lease of ' || previous_owner || ' expired' END
    FROM recovered
)
-- ends_step: a workflow step ended dead, whose dependants end_dependants ends
-- in the same transaction (ADR 0125).
SELECT id AS job_id, workflow_id IS NOT NULL AND (is_backstop OR is_cancelled) AS ends_step
FROM recovered

-- =====================================================================================
-- Coordination (coordination.py): the wait for the next job, the database clock,
-- leadership.
-- =====================================================================================

-- name: time_until_visible :one
-- Soonest pending visible_at per kind from _jobs_visible (one index probe per
-- kind, not a scan of every pending row), for the worker's wait (ADR 20). A
-- paused kind (ADR 0139) has nothing due: its backlog must not shorten the wait
-- to a spin; resuming it wakes the workers.
SELECT min(soonest.visible_at) - now() AS wait
FROM unnest(%(kinds)s::text[]) AS k(kind)
CROSS JOIN LATERAL (
    SELECT visible_at
    FROM {{prefix}}_jobs
    WHERE status = 'pending' AND kind = k.kind
    ORDER BY visible_at
    LIMIT 1
) AS soonest
WHERE NOT EXISTS (
    SELECT 1 FROM {{prefix}}_kind_controls AS s WHERE s.kind = k.kind AND s.paused
)

-- name: database_now :one
SELECT clock_timestamp() AS now

-- name: try_advisory_lock :one
-- Session-level: held for as long as the leader's dedicated connection lives.
SELECT pg_try_advisory_lock(hashtextextended(%(lock_name)s, 0)) AS acquired

-- name: try_advisory_xact_lock :one
-- Leadership behind a transaction-mode pooler without a direct URL: the lock
-- lasts as long as the transaction its holder keeps open (ADR 0123).
SELECT pg_try_advisory_xact_lock(hashtextextended(%(lock_name)s, 0)) AS acquired

-- name: advisory_unlock :exec
SELECT pg_advisory_unlock(hashtextextended(%(lock_name)s, 0))

-- name: leader :one
-- Who holds a leadership role (try_lead's advisory lock; ADR 0131), read from
-- the lock itself, so a holder that died is gone with its session: pg_locks
-- shows a bigint advisory key as classid (high 32 bits), objid (low 32 bits),
-- objsubid 1, and pg_stat_activity names the holding session. Its holder names
-- itself in application_name when it connects. "Since" is when that session
-- began (a leadership connection is opened for the one try that took the
-- lock), or, for a lock held in an open transaction behind a pooler (whose
-- server session predates it), when that transaction began. Reads two shared-
-- memory views, no table; the dashboard runs it once per interval.
WITH lock_key AS (
    SELECT hashtextextended(%(lock_name)s, 0) AS k
)
SELECT a.application_name, a.pid AS session_pid,
       CASE WHEN a.state LIKE 'idle in transaction%%' OR a.xact_start < a.query_start
            THEN a.xact_start ELSE a.backend_start END AS since
FROM lock_key
JOIN pg_locks AS l
  ON l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
 AND l.classid = ((lock_key.k >> 32) & 4294967295)::oid
 AND l.objid = (lock_key.k & 4294967295)::oid
 AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
JOIN pg_stat_activity AS a ON a.pid = l.pid
LIMIT 1

-- =====================================================================================
-- Operator (operations.py): reading jobs back, retry and cancel (one job or by filter),
-- cleanup, stats and the dashboard's counts.
-- =====================================================================================

-- name: get_job :one
SELECT * FROM {{prefix}}_jobs WHERE id = %(id)s

-- name: lock_job :one
SELECT * FROM {{prefix}}_jobs WHERE id = %(id)s FOR UPDATE

-- name: job_timeline :many
-- Timeline in id order straight from _journal_job (job_id, id), no sort (ADR 18).
SELECT * FROM {{prefix}}_journal WHERE job_id = %(id)s ORDER BY id

-- name: list_jobs :many
-- Newest first with keyset pagination on (created_at, id): a backward scan of
-- _jobs_created that stops after LIMIT rows (ADR 18). Filters are optional. The
-- cursor is always a row comparison (the first page compares with 'infinity'),
-- so it stays an index condition in a generic plan too, never a filter.
SELECT *
FROM {{prefix}}_jobs
WHERE (%(status)s::text IS NULL OR status = %(status)s::text)
  AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
  AND (created_at, id) < (coalesce(%(after_created_at)s::timestamptz, 'infinity'),
                          coalesce(%(after_id)s::text, ''))
ORDER BY created_at DESC, id DESC
LIMIT %(limit)s

-- name: list_jobs_noted :many
-- The dashboard's listing: list_jobs plus each row's last journal entry (one probe
-- of _journal_job per row), optionally filtered on text in that entry's note
-- (case-insensitive substring; strpos, so LIKE's wildcards are plain characters).
-- The note filter cannot use an index: it reads newest first until LIMIT rows match.
SELECT j.*, last.outcome AS last_outcome, last.note AS last_note
FROM {{prefix}}_jobs AS j
LEFT JOIN LATERAL (
    SELECT e.outcome, e.note FROM {{prefix}}_journal AS e
    WHERE e.job_id = j.id ORDER BY e.id DESC LIMIT 1
) AS last ON true
WHERE (%(status)s::text IS NULL OR j.status = %(status)s::text)
  AND (%(kind)s::text IS NULL OR j.kind = %(kind)s::text)
  AND (%(note)s::text IS NULL OR strpos(lower(last.note), lower(%(note)s::text)) > 0)
  AND (j.created_at, j.id) < (coalesce(%(after_created_at)s::timestamptz, 'infinity'),
                              coalesce(%(after_id)s::text, ''))
ORDER BY j.created_at DESC, j.id DESC
LIMIT %(limit)s

-- name: count_jobs :one
-- How many rows a bulk action by filter would touch, shown before it is confirmed.
SELECT count(*) AS jobs
FROM {{prefix}}_jobs AS j
WHERE (%(status)s::text IS NULL OR j.status = %(status)s::text)
  AND (%(kind)s::text IS NULL OR j.kind = %(kind)s::text)
  AND (%(note)s::text IS NULL OR strpos(lower((
          SELECT e.note FROM {{prefix}}_journal AS e
          WHERE e.job_id = j.id ORDER BY e.id DESC LIMIT 1)), lower(%(note)s::text)) > 0)

-- name: stats :many
-- Operator view: one pass over the table, grouped (not a hot path).
SELECT kind, status, count(*) AS jobs,
       count(*) FILTER (WHERE status = 'pending' AND visible_at > now()) AS scheduled,
       now() - min(visible_at) FILTER (WHERE status = 'pending' AND visible_at <= now())
           AS oldest_eligible_age
FROM {{prefix}}_jobs
GROUP BY kind, status
ORDER BY kind, status

-- name: throughput :many
-- Dashboard chart: completed and dead jobs per kind per minute since the start of
-- the minute `window` ago. A range scan of the partial _jobs_finished; the outer
-- row always exists so the database's current minute comes back with no jobs too.
SELECT date_trunc('minute', now()) AS current_minute, t.kind, t.minute, t.completed, t.dead
FROM (SELECT 1) AS clock
LEFT JOIN (
    SELECT kind, date_trunc('minute', finished_at) AS minute,
           count(*) FILTER (WHERE status = 'completed') AS completed,
           count(*) FILTER (WHERE status = 'dead') AS dead
    FROM {{prefix}}_jobs
    WHERE finished_at IS NOT NULL
      AND finished_at >= date_trunc('minute', now()) - %(window)s
    GROUP BY kind, date_trunc('minute', finished_at)
) AS t ON true
ORDER BY t.kind, t.minute

-- name: backlog :one
-- Due pending jobs, for external scalers (`venturi stats --backlog`, KEDA's
-- PostgreSQL scaler: docs/operations/keda.md runs this text with the kind filter
-- left out). Counted from a partial index of pending rows, never the table.
SELECT count(*) AS backlog
FROM {{prefix}}_jobs
WHERE status = 'pending' AND visible_at <= now()
  AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)

-- name: retry_job :one
-- Operator retry of a dead job: pending, visible now, a fresh failure budget,
-- no cancellation request left over from a cancelled run (ADR 0121), and no
-- expiry, so an expired job runs (ADR 0135). For a workflow step,
-- resume_dependants then revives the steps it had ended (ADR 0125).
WITH retried AS (
    UPDATE {{prefix}}_jobs
    SET status = 'pending', visible_at = now(), finished_at = NULL, failure_count = 0,
        cancel_requested_at = NULL, expires_at = NULL
    WHERE id = %(id)s AND status = 'dead'
    RETURNING *
), entry AS (
    INSERT INTO {{prefix}}_journal (job_id, kind, run_no, recorded_at, outcome, note)
    SELECT id, kind, run_count, now(), 'retried', 'retried by operator' FROM retried
)
SELECT * FROM retried

-- name: cancel_job :one
-- For a workflow step, end_dependants then ends its dependants (ADR 0125).
WITH cancelled AS (
    UPDATE {{prefix}}_jobs
    SET status = 'dead', finished_at = now()
    WHERE id = %(id)s AND status = 'pending'
    RETURNING *
), entry AS (
    INSERT INTO {{prefix}}_journal (job_id, kind, run_no, recorded_at, outcome, note)
    SELECT id, kind, run_count, now(), 'dead', %(note)s FROM cancelled
)
SELECT * FROM cancelled

-- name: request_cancel :one
-- Cancellation of a running job (ADR 0121): one statement marks the request;
-- the row stays claimed until the worker running it records the run dead, or
-- the fence-aware statements (finish, release, recovery) end it dead. A second
-- request keeps the time of the first.
UPDATE {{prefix}}_jobs
SET cancel_requested_at = coalesce(cancel_requested_at, now())
WHERE id = %(id)s AND status = 'claimed'
RETURNING *

-- name: retry_matching :one
-- Bulk operator retry (as retry_job) of dead rows matching the filter, one batch.
-- SKIP LOCKED: a row another transaction holds is left for the next batch.
-- A retried row is pending with a new last note, so it never matches again.
WITH picked AS (
    SELECT j.id
    FROM {{prefix}}_jobs AS j
    WHERE j.status = 'dead'
      AND (%(kind)s::text IS NULL OR j.kind = %(kind)s::text)
      AND (%(note)s::text IS NULL OR strpos(lower((
              SELECT e.note FROM {{prefix}}_journal AS e
              WHERE e.job_id = j.id ORDER BY e.id DESC LIMIT 1)), lower(%(note)s::text)) > 0)
    LIMIT %(batch_size)s
    FOR UPDATE SKIP LOCKED
), retried AS (
    UPDATE {{prefix}}_jobs AS j
    SET status = 'pending', visible_at = now(), finished_at = NULL, failure_count = 0,
        expires_at = NULL
    FROM picked
    WHERE j.id = picked.id AND j.status = 'dead'
    RETURNING j.id, j.kind, j.run_count, j.workflow_id
), entry AS (
    INSERT INTO {{prefix}}_journal (job_id, kind, run_no, recorded_at, outcome, note)
    SELECT id, kind, run_count, now(), 'retried', 'retried by operator' FROM retried
)
-- steps: the retried workflow steps, whose dependants resume_dependants revives
-- in the same transaction (ADR 0125).
SELECT count(*) AS changed,
       coalesce(array_agg(id) FILTER (WHERE workflow_id IS NOT NULL), ARRAY[]::text[])
           AS steps
FROM retried

-- name: cancel_matching :one
-- Bulk cancel (as cancel_job) of pending rows matching the filter, one batch; a
-- cancelled row is dead, so it never matches again.
WITH picked AS (
    SELECT j.id
    FROM {{prefix}}_jobs AS j
    WHERE j.status = 'pending'
      AND (%(kind)s::text IS NULL OR j.kind = %(kind)s::text)
      AND (%(note)s::text IS NULL OR strpos(lower((
              SELECT e.note FROM {{prefix}}_journal AS e
              WHERE e.job_id = j.id ORDER BY e.id DESC LIMIT 1)), lower(%(note)s::text)) > 0)
    LIMIT %(batch_size)s
    FOR UPDATE SKIP LOCKED
), cancelled AS (
    UPDATE {{prefix}}_jobs AS j
    SET status = 'dead', finished_at = now()
    FROM picked
    WHERE j.id = picked.id AND j.status = 'pending'
    RETURNING j.id, j.kind, j.run_count, j.workflow_id
), entry AS (
    INSERT INTO {{prefix}}_journal (job_id, kind, run_no, recorded_at, outcome, note)
    SELECT id, kind, run_count, now(), 'dead', %(cancel_note)s FROM cancelled
)
-- steps: the cancelled workflow steps, whose dependants end_dependants ends (ADR 0125).
SELECT count(*) AS changed,
       coalesce(array_agg(id) FILTER (WHERE workflow_id IS NOT NULL), ARRAY[]::text[])
           AS steps
FROM cancelled

-- name: cleanup_finished :one
-- Status-less cleanup: a range scan of the partial _jobs_finished, in bounded
-- batches; journals go by ON DELETE CASCADE (ADR 18).
WITH doomed AS (
    SELECT id
    FROM {{prefix}}_jobs
    WHERE finished_at IS NOT NULL AND finished_at < now() - %(older_than)s
    ORDER BY finished_at
    LIMIT %(batch_size)s
    FOR UPDATE SKIP LOCKED
), deleted AS (
    DELETE FROM {{prefix}}_jobs AS j USING doomed WHERE j.id = doomed.id
    RETURNING j.id, j.workflow_id
), unlinked AS (
    -- A workflow step's row and edges to its parents go with its job (ADR 0125).
    DELETE FROM {{prefix}}_edges AS e
    WHERE e.child_id = ANY(ARRAY(SELECT id FROM deleted WHERE workflow_id IS NOT NULL))
), unstepped AS (
    DELETE FROM {{prefix}}_steps AS s
    WHERE s.id = ANY(ARRAY(SELECT id FROM deleted WHERE workflow_id IS NOT NULL))
)
SELECT count(*) AS deleted FROM deleted

-- name: cleanup_finished_with_status :one
-- Status-filtered cleanup. The planner takes _jobs_finished (the cutoff as a range,
-- status checked on those rows) over _jobs_history, whose `kind` column sits
-- between status and finished_at so it cannot range-scan the cutoff: measured
-- faster for the whole delete, since rows go in finished_at (physical) order.
WITH doomed AS (
    SELECT id
    FROM {{prefix}}_jobs
    WHERE status = %(status)s AND finished_at < now() - %(older_than)s
    LIMIT %(batch_size)s
    FOR UPDATE SKIP LOCKED
), deleted AS (
    DELETE FROM {{prefix}}_jobs AS j USING doomed WHERE j.id = doomed.id
    RETURNING j.id, j.workflow_id
), unlinked AS (
    -- A workflow step's row and edges to its parents go with its job (ADR 0125).
    DELETE FROM {{prefix}}_edges AS e
    WHERE e.child_id = ANY(ARRAY(SELECT id FROM deleted WHERE workflow_id IS NOT NULL))
), unstepped AS (
    DELETE FROM {{prefix}}_steps AS s
    WHERE s.id = ANY(ARRAY(SELECT id FROM deleted WHERE workflow_id IS NOT NULL))
)
SELECT count(*) AS deleted FROM deleted

-- =====================================================================================
-- Workers (workers.py): the worker registry (ADR 0119).
-- =====================================================================================

-- name: register_worker :exec
-- A fresh registry entry at start (ADR 0119). It replaces an entry of the same
-- id: one left by an earlier process that had this host and pid (a restarted
-- container) is not taken over with its old started_at.
INSERT INTO {{prefix}}_workers AS w
    (id, version, kinds, concurrency, running, started_at, heartbeat_at, expires_at)
VALUES (%(id)s, %(version)s, %(kinds)s, %(concurrency)s, 0, now(), now(),
        now() + %(expires_in)s)
ON CONFLICT (id) DO UPDATE
SET version = EXCLUDED.version, kinds = EXCLUDED.kinds, concurrency = EXCLUDED.concurrency,
    running = 0, started_at = now(), heartbeat_at = now(), expires_at = EXCLUDED.expires_at

-- name: heartbeat_worker :many
-- One round trip per heartbeat (ADR 0119): refresh our entry (re-created if a
-- sweep took it while we were cut off), then delete a bounded batch of other
-- expired entries. The sweep reads `refreshed`, so our row is written (and
-- locked) before any other is locked, and SKIP LOCKED never waits on a row
-- another heartbeat holds: two heartbeats cannot deadlock. A row refreshed
-- before the sweep locks it is re-checked and kept.
WITH refreshed AS (
    INSERT INTO {{prefix}}_workers AS w
        (id, version, kinds, concurrency, running, started_at, heartbeat_at, expires_at)
    VALUES (%(id)s, %(version)s, %(kinds)s, %(concurrency)s, %(running)s, now(), now(),
            now() + %(expires_in)s)
    ON CONFLICT (id) DO UPDATE
    SET running = EXCLUDED.running, heartbeat_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING w.id
), expired AS (
    SELECT id
    FROM {{prefix}}_workers
    WHERE expires_at < now() AND id <> (SELECT id FROM refreshed)
    ORDER BY expires_at
    LIMIT %(sweep_limit)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM {{prefix}}_workers AS w
USING expired
WHERE w.id = expired.id
RETURNING w.id

-- name: deregister_worker :one
DELETE FROM {{prefix}}_workers WHERE id = %(id)s RETURNING id

-- name: list_workers :many
-- Expired entries are left out until a sweep deletes them (ADR 0119).
SELECT *
FROM {{prefix}}_workers
WHERE expires_at > now()
ORDER BY started_at DESC, id

-- name: unserved_kinds :many
-- Kinds with due pending jobs that no live worker serves (ADR 0119), run by
-- every worker once a minute. The pending kinds come from a skip scan of
-- _jobs_visible (kind, visible_at): each step is one index probe that returns
-- the next kind and its soonest visible_at, so the cost is one probe per
-- pending kind, however many jobs wait.
WITH RECURSIVE pending_kinds AS (
    (SELECT kind, visible_at
     FROM {{prefix}}_jobs
     WHERE status = 'pending'
     ORDER BY kind, visible_at
     LIMIT 1)
    UNION ALL
    SELECT next.kind, next.visible_at
    FROM pending_kinds AS p
    CROSS JOIN LATERAL (
        SELECT kind, visible_at
        FROM {{prefix}}_jobs
        WHERE status = 'pending' AND kind > p.kind
        ORDER BY kind, visible_at
        LIMIT 1
    ) AS next
), served AS (
    SELECT DISTINCT unnest(kinds) AS kind
    FROM {{prefix}}_workers
    WHERE expires_at > now()
)
SELECT p.kind
FROM pending_kinds AS p
WHERE p.visible_at <= now() AND NOT EXISTS (SELECT 1 FROM served AS s WHERE s.kind = p.kind)
ORDER BY p.kind

-- =====================================================================================
-- Results (results.py): stored results and their waiters (ADR 0124).
-- =====================================================================================

-- name: read_result :one
-- What a result waiter reads (ADR 0124): one primary-key probe, and one probe of
-- _journal_job (job_id, id) backwards for the last note. A workflow step not yet a
-- job is read from _steps (ADR 0125): waiting reads as pending (not ended yet);
-- in one statement's snapshot a step not enqueued has no job row.
SELECT j.status, j.result::text AS result,
       (SELECT e.note FROM {{prefix}}_journal AS e
        WHERE e.job_id = j.id ORDER BY e.id DESC LIMIT 1) AS note
FROM {{prefix}}_jobs AS j
WHERE j.id = %(id)s
UNION ALL
SELECT CASE s.status WHEN 'waiting' THEN 'pending' ELSE s.status END, NULL, s.note
FROM {{prefix}}_steps AS s
WHERE s.id = %(id)s AND s.status <> 'enqueued'

-- name: await_result :exec
-- A waiter's mark (ADR 0124): finish_jobs wakes it when the row ends. Only rows
-- not yet terminal; an already-marked row is not written again. No indexed column
-- changes, so the update can be HOT and the claim index is untouched. A waiting
-- workflow step is marked in _steps, and the job it becomes keeps the mark (ADR 0125).
WITH step AS (
    UPDATE {{prefix}}_steps
    SET result_awaited = true
    WHERE id = %(id)s AND status = 'waiting' AND NOT result_awaited
)
UPDATE {{prefix}}_jobs
SET result_awaited = true
WHERE id = %(id)s AND status IN ('pending', 'claimed') AND NOT result_awaited

-- =====================================================================================
-- Workflows (workflows.py): workflows written, their steps ended or revived outside a
-- finish, read back and cleaned up (ADR 0125, 0131).
-- =====================================================================================

-- name: enqueue_workflow :exec
-- A whole workflow in one statement (ADR 0125): a _steps row per step, its first
-- steps pending jobs too, the others waiting with their count of parents, every
-- (parent, child) edge, with one wake-up at commit. Ids and positions are made
-- when the workflow is built, so a step is written once or not at all.
WITH input AS (
    SELECT i.*, clock_timestamp() AS enqueued_at
    FROM unnest(
        %(ids)s::text[], %(kinds)s::text[], %(payloads)s::text[], %(priorities)s::smallint[],
        %(delays)s::interval[], %(waiting_fors)s::int[], %(input_args)s::text[],
        %(input_alls)s::bool[], %(positions)s::int[]
    ) AS i(id, kind, payload, priority, delay, waiting_for, input_arg, input_all, position)
), inserted AS (
    INSERT INTO {{prefix}}_jobs (id, kind, payload, priority, status, created_at, visible_at,
                                 workflow_id)
    SELECT id, kind, payload::jsonb, priority, 'pending', enqueued_at, enqueued_at + delay,
           %(workflow_id)s
    FROM input
    WHERE waiting_for = 0
    RETURNING 1
), steps AS (
    INSERT INTO {{prefix}}_steps (id, workflow_id, kind, payload, priority, position,
                                  waiting_for, input_arg, input_all, status, created_at)
    SELECT id, %(workflow_id)s, kind, payload::jsonb, priority, position, waiting_for,
           input_arg, input_all, CASE WHEN waiting_for = 0 THEN 'enqueued' ELSE 'waiting' END,
           enqueued_at
    FROM input
), linked AS (
    INSERT INTO {{prefix}}_edges (parent_id, child_id, position)
    SELECT * FROM unnest(%(edge_parents)s::text[], %(edge_children)s::text[],
                         %(edge_positions)s::int[])
), on_error AS (
    -- chain(...).on_error(handler.s()) (ADR 0138): read by the _on_dead trigger.
    INSERT INTO {{prefix}}_workflow_callbacks (workflow_id, callback_kind)
    SELECT %(workflow_id)s, %(on_error)s::text WHERE %(on_error)s::text IS NOT NULL
)
SELECT pg_notify(%(channel)s, '') FROM (SELECT count(*) FROM inserted) AS done

-- name: end_dependants :many
-- The waiting descendants of workflow steps that ended dead outside a finish
-- (recovery at the backstop, cancel), ended dead in the caller's transaction with
-- the note naming the step (ADR 0125; finish_jobs does the same inline). Locked in
-- id order, as finish_jobs locks children, so the two never deadlock.
WITH RECURSIVE doomed(id, cause_id, cause_kind) AS (
    SELECT e.child_id, m.id, m.kind
    FROM {{prefix}}_edges AS e JOIN {{prefix}}_jobs AS m ON m.id = e.parent_id
    WHERE e.parent_id = ANY(%(ids)s::text[]) AND m.id = ANY(%(ids)s::text[])
      AND m.status = 'dead'
    UNION
    SELECT e.child_id, x.cause_id, x.cause_kind
    FROM doomed AS x JOIN {{prefix}}_edges AS e ON e.parent_id = x.id
), locked AS (
    SELECT c.id
    FROM {{prefix}}_steps AS c
    WHERE c.id = ANY(ARRAY(SELECT id FROM doomed)) AND c.status = 'waiting'
    ORDER BY c.id
    FOR UPDATE
), ended AS (
    UPDATE {{prefix}}_steps AS c
    SET status = 'dead', finished_at = now(),
        note = 'dependency ' || d.cause_id || ' (' || d.cause_kind || ') ended dead'
    FROM locked AS l, (SELECT DISTINCT ON (id) * FROM doomed ORDER BY id, cause_id) AS d
    WHERE c.id = l.id AND d.id = l.id
    RETURNING c.id, c.result_awaited
)
SELECT id AS step_id,
       CASE WHEN result_awaited THEN pg_notify(%(result_channel)s || id, '') END AS woken
FROM ended

-- name: resume_dependants :many
-- app.retry of a workflow step (ADR 0125): the steps ended dead because of it
-- wait again, with the counts they kept, so each becomes a job when its parents
-- complete. A step below another dead job stays dead, as that job does.
WITH RECURSIVE revived(id) AS (
    SELECT e.child_id
    FROM {{prefix}}_edges AS e JOIN {{prefix}}_steps AS c ON c.id = e.child_id
    WHERE e.parent_id = ANY(%(ids)s::text[]) AND c.status = 'dead'
    UNION
    SELECT e.child_id
    FROM revived AS r
    JOIN {{prefix}}_edges AS e ON e.parent_id = r.id
    JOIN {{prefix}}_steps AS c ON c.id = e.child_id
    WHERE c.status = 'dead'
), locked AS (
    SELECT c.id
    FROM {{prefix}}_steps AS c
    WHERE c.id = ANY(ARRAY(SELECT id FROM revived)) AND c.status = 'dead'
    ORDER BY c.id
    FOR UPDATE
)
UPDATE {{prefix}}_steps AS c
SET status = 'waiting', finished_at = NULL, note = 'waiting again: a dependency was retried'
FROM locked AS l
WHERE c.id = l.id
RETURNING c.id AS step_id

-- name: workflow_steps :many
-- app.workflow(id) (ADR 0125): the steps from _steps_workflow in position order;
-- an enqueued one's state and note are its job's (one primary-key probe each,
-- LATERAL so a large chord is never a hash join over the whole jobs table, and
-- _journal_job), and its parents come in input order from _edges_child.
SELECT s.id, s.kind, s.position,
       coalesce(j.status, s.status) AS status,
       CASE WHEN j.status IS NOT NULL THEN j.finished_at ELSE s.finished_at END AS finished_at,
       CASE WHEN j.status IS NOT NULL
            THEN (SELECT n.note FROM {{prefix}}_journal AS n
                  WHERE n.job_id = s.id ORDER BY n.id DESC LIMIT 1)
            ELSE s.note END AS note,
       ARRAY(SELECT e.parent_id FROM {{prefix}}_edges AS e
             WHERE e.child_id = s.id ORDER BY e.position) AS parents
FROM {{prefix}}_steps AS s
LEFT JOIN LATERAL (
    SELECT j.status, j.finished_at FROM {{prefix}}_jobs AS j
    WHERE j.id = s.id AND s.status = 'enqueued'
    OFFSET 0
) AS j ON true
WHERE s.workflow_id = %(workflow_id)s
ORDER BY s.position

-- name: list_workflows :many
-- The dashboard's recent workflows (ADR 0131): the newest first, `limit` of them
-- created before the workflow `before` (NULL: from the newest). A workflow id is
-- a ULID made when the workflow is built, so id order is creation order: the
-- distinct ids come from a backward walk of _steps_workflow that stops once it
-- has `limit` of them; each is then summed up over its own range of that index,
-- an enqueued step's state being its job's (a primary-key probe, LATERAL as in
-- workflow_steps). A workflow costs a read per step.
WITH recent AS (
    SELECT DISTINCT workflow_id
    FROM {{prefix}}_steps
    WHERE %(before)s::text IS NULL OR workflow_id < %(before)s::text
    ORDER BY workflow_id DESC
    LIMIT %(limit)s
)
SELECT r.workflow_id AS id, c.*
FROM recent AS r
CROSS JOIN LATERAL (
    SELECT count(*) FILTER (WHERE coalesce(j.status, s.status) = 'waiting') AS waiting,
           count(*) FILTER (WHERE j.status = 'pending') AS pending,
           count(*) FILTER (WHERE j.status = 'claimed') AS claimed,
           count(*) FILTER (WHERE j.status = 'completed') AS completed,
           count(*) FILTER (WHERE coalesce(j.status, s.status) = 'dead') AS dead,
           min(s.created_at) AS created_at,
           max(coalesce(j.finished_at, s.finished_at)) AS finished_at
    FROM {{prefix}}_steps AS s
    LEFT JOIN LATERAL (
        SELECT j.status, j.finished_at FROM {{prefix}}_jobs AS j
        WHERE j.id = s.id AND s.status = 'enqueued'
        OFFSET 0
    ) AS j ON true
    WHERE s.workflow_id = r.workflow_id
) AS c
ORDER BY r.workflow_id DESC

-- name: workflow_id_of :one
-- The workflow a job or a waiting step belongs to (ADR 0131): one _steps_pkey
-- probe (every step has a _steps row, kept as long as its job).
SELECT workflow_id FROM {{prefix}}_steps WHERE id = %(id)s

-- name: cleanup_dead_steps :one
-- Cleanup of workflow steps that never ran because a dependency ended dead
-- (ADR 0125), by their end time from _steps_ended, in bounded batches; their
-- edges go with them.
WITH doomed AS (
    SELECT id
    FROM {{prefix}}_steps
    WHERE status = 'dead' AND finished_at < now() - %(older_than)s
    ORDER BY finished_at
    LIMIT %(batch_size)s
    FOR UPDATE SKIP LOCKED
), deleted AS (
    DELETE FROM {{prefix}}_steps AS s
    WHERE s.id = ANY(ARRAY(SELECT id FROM doomed))
    RETURNING s.id
), unlinked AS (
    DELETE FROM {{prefix}}_edges AS e WHERE e.child_id = ANY(ARRAY(SELECT id FROM deleted))
)
SELECT count(*) AS deleted FROM deleted

-- =====================================================================================
-- Control (control.py): kinds paused or given limit overrides, stored schedules, the
-- audit trail (ADR 0139). Operator paths, beside kind_controls (every worker, once a
-- second) and stored_schedules (beat, every iteration): both read tiny tables.
-- =====================================================================================

-- name: kind_controls :many
SELECT kind, paused, global_concurrency, rate_limit, key_concurrency, updated_at
FROM {{prefix}}_kind_controls
WHERE %(kinds)s::text[] IS NULL OR kind = ANY(%(kinds)s::text[])
ORDER BY kind

-- name: kind_known :one
-- Whether a kind has any job or stored state (set_limits of an unregistered kind):
-- one _jobs_history (status, kind, ...) probe per status, stopping at the first row.
SELECT EXISTS (
           SELECT 1 FROM {{prefix}}_jobs
           WHERE status IN ('pending', 'claimed', 'completed', 'dead') AND kind = %(kind)s
       )
    OR EXISTS (SELECT 1 FROM {{prefix}}_kind_controls WHERE kind = %(kind)s) AS known

-- name: set_kind_paused :one
INSERT INTO {{prefix}}_kind_controls AS c (kind, paused)
VALUES (%(kind)s, %(paused)s)
ON CONFLICT (kind) DO UPDATE SET paused = excluded.paused, updated_at = now()
RETURNING kind, paused, global_concurrency, rate_limit, key_concurrency, updated_at

-- name: set_kind_limits :one
-- Each override changes only when its set_* flag is true (a value, or NULL: cleared).
INSERT INTO {{prefix}}_kind_controls AS c (kind, global_concurrency, rate_limit, key_concurrency)
VALUES (%(kind)s, %(global_concurrency)s, %(rate_limit)s, %(key_concurrency)s)
ON CONFLICT (kind) DO UPDATE SET
    global_concurrency = CASE WHEN %(set_global_concurrency)s
                              THEN excluded.global_concurrency ELSE c.global_concurrency END,
    rate_limit = CASE WHEN %(set_rate_limit)s THEN excluded.rate_limit ELSE c.rate_limit END,
    key_concurrency = CASE WHEN %(set_key_concurrency)s
                           THEN excluded.key_concurrency ELSE c.key_concurrency END,
    updated_at = now()
RETURNING kind, paused, global_concurrency, rate_limit, key_concurrency, updated_at

-- name: insert_audit :exec
INSERT INTO {{prefix}}_audit (actor, subject_type, subject, action, details)
VALUES (%(actor)s, %(subject_type)s, %(subject)s, %(action)s, %(details)s::jsonb)

-- name: audit_trail :many
-- One subject's changes, newest first: a backward range of _audit_subject.
SELECT id, at, actor, subject_type, subject, action, details
FROM {{prefix}}_audit
WHERE subject_type = %(subject_type)s AND subject = %(subject)s
ORDER BY id DESC
LIMIT %(limit)s

-- name: add_schedule :one
-- No row back: the name is taken (nothing written).
INSERT INTO {{prefix}}_schedules (name, cron, timezone, kind, kwargs)
VALUES (%(name)s, %(cron)s, %(timezone)s, %(kind)s, %(kwargs)s::jsonb)
ON CONFLICT (name) DO NOTHING
RETURNING name, cron, timezone, kind, kwargs, paused, created_at, updated_at

-- name: stored_schedules :many
SELECT name, cron, timezone, kind, kwargs, paused, created_at, updated_at
FROM {{prefix}}_schedules
ORDER BY name

-- name: set_schedule_paused :one
UPDATE {{prefix}}_schedules
SET paused = %(paused)s, updated_at = now()
WHERE name = %(name)s
RETURNING name, cron, timezone, kind, kwargs, paused, created_at, updated_at

-- name: remove_schedule :one
WITH gone AS (
    DELETE FROM {{prefix}}_schedules WHERE name = %(name)s
    RETURNING name, cron, timezone, kind, kwargs, paused, created_at, updated_at
), forgotten AS (
    DELETE FROM {{prefix}}_backfills WHERE name = %(name)s AND EXISTS (SELECT 1 FROM gone)
)
SELECT * FROM gone

-- name: record_backfill :many
-- The ticks of a backfill not enqueued by an earlier one: each row inserted is a
-- job to enqueue in the same transaction; a tick already recorded returns nothing.
INSERT INTO {{prefix}}_backfills (name, tick, job_id)
SELECT %(name)s, t.tick, t.job_id
FROM unnest(%(ticks)s::timestamptz[], %(job_ids)s::text[]) AS t(tick, job_id)
ORDER BY t.tick
ON CONFLICT (name, tick) DO NOTHING
RETURNING tick, job_id

-- =====================================================================================
-- Durable (durable.py): a job's recorded steps and the events sent to it (ADR 0137).
-- =====================================================================================

-- name: load_durable :many
-- What a durable run reads once, before its first step: every recorded step (in
-- recording order) and event of the job, one probe of each table's primary key
-- (job_id leads), and a last row that is always there with the database's now.
SELECT s.kind, s.name, s.run_no, s.recorded_at AS at, s.result::text AS value, s.wake_at,
       s.position
FROM {{prefix}}_checkpoints AS s
WHERE s.job_id = %(id)s
UNION ALL
SELECT 'event', e.name, NULL, e.sent_at, e.payload::text, NULL, NULL
FROM {{prefix}}_events AS e
WHERE e.job_id = %(id)s
UNION ALL
SELECT 'now', '', NULL, now(), NULL, NULL, NULL
ORDER BY position

-- name: record_step :one
-- One step, fenced on its claim (ADR 19) in the statement that writes it: the
-- job's row is locked FOR SHARE, so a recovery of the claim waits until the step
-- is committed (and then the next claim reads it) or, committed first, leaves this
-- run's step unwritten. A step already recorded (its key) is left as it is.
-- wake_at (sleeps, waits with a timeout) from the database clock.
WITH fence AS (
    SELECT j.id, j.run_count
    FROM {{prefix}}_jobs AS j
    WHERE j.id = %(id)s AND j.status = 'claimed' AND j.claimed_by = %(claimed_by)s
      AND j.run_count = %(run_count)s
    FOR SHARE
)
INSERT INTO {{prefix}}_checkpoints (job_id, kind, name, run_no, recorded_at, result, wake_at)
SELECT f.id, %(kind)s, %(name)s, f.run_count, now(), %(result)s::jsonb,
       now() + %(wake_after)s::interval
FROM fence AS f
ON CONFLICT (job_id, kind, name) DO NOTHING
RETURNING kind, name, run_no, recorded_at, result::text AS result, wake_at

-- name: send_event :one
-- An event, sent once (SPEC 6.1): the job's row is locked first, so two sends and a
-- send and a finish serialize on it. A pending job that waits for this event (a
-- recorded wait of its name) is visible now; a claimed one gets woken_run, which
-- its paused finish reads (finish_jobs) to make it visible now: an event sent
-- while its run is between "no event yet" and its finish still wakes it. A wake-up
-- at commit when the job is visible now. Nothing is written for an unknown or
-- terminal job, or a name sent before; the row says which.
WITH job AS (
    SELECT j.id, j.status
    FROM {{prefix}}_jobs AS j
    WHERE j.id = %(id)s
    FOR NO KEY UPDATE
), sent AS (
    INSERT INTO {{prefix}}_events (job_id, name, payload, sent_at)
    SELECT job.id, %(name)s, %(payload)s::jsonb, now()
    FROM job
    WHERE job.status IN ('pending', 'claimed')
    ON CONFLICT (job_id, name) DO NOTHING
    RETURNING job_id
), woken AS (
    UPDATE {{prefix}}_jobs AS j
    SET visible_at = CASE WHEN j.status = 'pending' AND EXISTS (
                              SELECT 1 FROM {{prefix}}_checkpoints AS s
                              WHERE s.job_id = j.id AND s.kind = 'wait' AND s.name = %(name)s)
                          THEN least(j.visible_at, now()) ELSE j.visible_at END,
        woken_run = CASE WHEN j.status = 'claimed' THEN j.run_count ELSE j.woken_run END
    FROM sent
    WHERE j.id = sent.job_id
    RETURNING j.status, j.visible_at <= now() AS is_visible
)
SELECT job.status, EXISTS (SELECT 1 FROM sent) AS is_sent,
       CASE WHEN EXISTS (SELECT 1 FROM woken WHERE woken.status = 'pending' AND is_visible)
            THEN pg_notify(%(channel)s, '') END AS notified
FROM (SELECT 1) AS one
LEFT JOIN job ON true

-- name: reset_steps :exec
-- retry(reset_steps=True): the job's steps go, in the retry's transaction.
DELETE FROM {{prefix}}_checkpoints WHERE job_id = %(id)s

-- =====================================================================================
-- Schema (backend.py): a service's start check (migrations are migrator.py's).
-- =====================================================================================

-- name: check_schema :many
-- A service's start check (ADR 0118): names every table the runtime reads, and the
-- newest column of each, so an unmigrated prefix raises UndefinedTable, one behind
-- the code UndefinedColumn (both SchemaMissing), and a role without its grants
-- InsufficientPrivilege; WHERE false plans to a Result, no scan. A migration that
-- adds storage the runtime reads adds it here. Later tables go in the select list,
-- which is resolved after FROM, so the oldest missing migration is the one named.
SELECT j.cancel_requested_at, e.traceback, w.expires_at, j.result_awaited, j.headers,
       (SELECT l.next_start_at FROM {{prefix}}_claim_limits AS l LIMIT 1) AS next_start_at,
       j.workflow_id, (SELECT d.result FROM {{prefix}}_edges AS d LIMIT 1) AS edge_result,
       (SELECT s.result_awaited FROM {{prefix}}_steps AS s LIMIT 1) AS step_awaited,
       j.fair_key,
       (SELECT f.fair_key FROM {{prefix}}_fair_cursors AS f LIMIT 1) AS fair_cursor,
       j.expires_at, j.woken_run,
       (SELECT d.position FROM {{prefix}}_checkpoints AS d LIMIT 1) AS step_position,
       (SELECT v.sent_at FROM {{prefix}}_events AS v LIMIT 1) AS event_sent_at,
       (SELECT r.next_start_at FROM {{prefix}}_key_rates AS r LIMIT 1) AS key_rate,
       (SELECT s.next_start_at FROM {{prefix}}_shared_limits AS s LIMIT 1) AS shared_rate,
       (SELECT c.callback_kind FROM {{prefix}}_dead_callbacks AS c LIMIT 1) AS dead_callback,
       (SELECT c.paused FROM {{prefix}}_kind_controls AS c LIMIT 1) AS kind_paused,
       (SELECT s.cron FROM {{prefix}}_schedules AS s LIMIT 1) AS schedule_cron
FROM {{prefix}}_jobs AS j, {{prefix}}_journal AS e, {{prefix}}_workers AS w
WHERE false

-- =====================================================================================
-- Callbacks and Keys (callbacks.py): what the _on_dead trigger (V13) enqueues, and
-- the keys of keyed kinds (ADR 0138).
-- =====================================================================================

-- name: set_dead_callbacks :exec
-- A worker's start: each served kind's callback kind, or none (NULL: deleted), so a
-- callback removed from the code stops with the next deploy. In kind order.
WITH given AS (
    SELECT * FROM unnest(%(kinds)s::text[], %(callback_kinds)s::text[]) AS g(kind, callback_kind)
), removed AS (
    DELETE FROM {{prefix}}_dead_callbacks AS c
    USING given AS g
    WHERE c.kind = g.kind AND g.callback_kind IS NULL
)
INSERT INTO {{prefix}}_dead_callbacks AS c (kind, callback_kind)
SELECT kind, callback_kind FROM given WHERE callback_kind IS NOT NULL ORDER BY kind
ON CONFLICT (kind) DO UPDATE SET callback_kind = excluded.callback_kind
WHERE c.callback_kind IS DISTINCT FROM excluded.callback_kind

-- name: key_occupancy :many
-- The dashboard's busiest keys of a keyed kind (ADR 0138): its claimed rows by
-- (status, kind) in _jobs_history, its pending keyed rows from _jobs_fair (an
-- index-only scan of the kind's pending keyed rows: a dashboard read, cached).
SELECT key, sum(running) AS running, sum(pending) AS pending
FROM (
    SELECT fair_key AS key, count(*) AS running, 0 AS pending
    FROM {{prefix}}_jobs
    WHERE status = 'claimed' AND kind = %(kind)s AND fair_key IS NOT NULL
    GROUP BY fair_key
    UNION ALL
    SELECT fair_key, 0, count(*)
    FROM {{prefix}}_jobs
    WHERE status = 'pending' AND kind = %(kind)s AND fair_key IS NOT NULL
    GROUP BY fair_key
) AS per_status
GROUP BY key
ORDER BY sum(running) DESC, sum(pending) DESC, key
LIMIT %(limit)s
