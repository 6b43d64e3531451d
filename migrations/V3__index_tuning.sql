-- Tuning step: after this file the schema equals the seed's DDL exactly.

-- Claim indexes carry visible_at as a trailing key column, so `visible_at <= now()`
-- is checked in the index and future-visible rows cost no heap fetch.
DROP INDEX {{prefix}}_jobs_claim;
CREATE INDEX {{prefix}}_jobs_claim
    ON {{prefix}}_jobs (kind, priority, created_at, visible_at)
    WHERE status = 'pending';
DROP INDEX {{prefix}}_jobs_claim_priority;
CREATE INDEX {{prefix}}_jobs_claim_priority
    ON {{prefix}}_jobs (priority, created_at, visible_at)
    WHERE status = 'pending';

-- Dedup lookup returns the oldest pending sibling without a sort.
DROP INDEX {{prefix}}_jobs_dedup;
CREATE INDEX {{prefix}}_jobs_dedup
    ON {{prefix}}_jobs (kind, dedup_key, created_at)
    WHERE dedup_key IS NOT NULL AND status = 'pending';

-- Status-less cleanup of terminal rows as an indexed range scan.
CREATE INDEX {{prefix}}_jobs_finished
    ON {{prefix}}_jobs (finished_at)
    WHERE finished_at IS NOT NULL;

-- Timeline in id order without a sort.
DROP INDEX {{prefix}}_journal_job;
CREATE INDEX {{prefix}}_journal_job
    ON {{prefix}}_journal (job_id, id);

-- No code queries the journal by kind over time.
DROP INDEX {{prefix}}_journal_kind;
