-- (c) The business row plus one event through our capture: the INSERT that
-- relay.publish() issues, into the migrated outbox table (no trigger: the relay draws the
-- positions, 0017_relay_drawn_positions; the benchmark draws beside it).
\set c random(1, 100000) * :spread
BEGIN;
INSERT INTO bench_orders (customer, total_cents) VALUES ('customer-' || CAST(:c AS text), :c);
INSERT INTO outbox (topic, key, value, event_type)
VALUES ('orders', convert_to('customer-' || CAST(:c AS text), 'UTF8'),
        convert_to('{"customer":"customer-' || CAST(:c AS text) || '","total_cents":' || CAST(:c AS text) || ',"pad":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}', 'UTF8'),
        'OrderPlaced');
END;
