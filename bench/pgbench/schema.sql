-- Tables of the write-path comparison, created after the project's migrations.
CREATE TABLE bench_orders (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    customer text NOT NULL,
    total_cents bigint NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
-- The outbox's columns, defaults, identity and checks; a primary key; no triggers.
CREATE TABLE plain_outbox (LIKE outbox INCLUDING DEFAULTS INCLUDING IDENTITY INCLUDING CONSTRAINTS);
ALTER TABLE plain_outbox ALTER COLUMN partition DROP NOT NULL;
-- What only the relay's outbox needs: its transaction id, and the check that keeps it.
ALTER TABLE plain_outbox ALTER COLUMN txid DROP DEFAULT;
ALTER TABLE plain_outbox DROP CONSTRAINT IF EXISTS outbox_written_plainly;
ALTER TABLE plain_outbox ADD PRIMARY KEY (id);
