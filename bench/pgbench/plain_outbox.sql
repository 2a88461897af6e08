-- (b) The business row plus one event in a trigger-less outbox table of the same shape
-- (plain_outbox: the outbox's columns, a primary key, no triggers, no other index).
\set c random(1, 100000) * :spread
BEGIN;
INSERT INTO bench_orders (customer, total_cents) VALUES ('customer-' || CAST(:c AS text), :c);
INSERT INTO plain_outbox (topic, key, value, event_type)
VALUES ('orders', convert_to('customer-' || CAST(:c AS text), 'UTF8'),
        convert_to('{"customer":"customer-' || CAST(:c AS text) || '","total_cents":' || CAST(:c AS text) || ',"pad":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}', 'UTF8'),
        'OrderPlaced');
END;
