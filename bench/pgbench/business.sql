-- (a) The business row alone: one order per transaction.
-- Run with -D spread=1 (keys over 100,000 customers) or -D spread=0 (one hot key).
\set c random(1, 100000) * :spread
BEGIN;
INSERT INTO bench_orders (customer, total_cents) VALUES ('customer-' || CAST(:c AS text), :c);
END;
