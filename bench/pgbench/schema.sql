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
ALTER TABLE plain_outbox ADD PRIMARY KEY (id);
