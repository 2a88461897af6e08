-- Least-privilege roles for the relay's users. `relay db roles` runs this file; a DBA may
-- run it by hand instead (psql -v ON_ERROR_STOP=1 -f roles.sql). Idempotent.
--
--   outbox_writer  services: INSERT into outbox, nothing else (no function runs in a
--                  writer's transaction)
--   outbox_relay   `relay run` and jobs/outbox_relay.py: read and clean up the outbox,
--                  draw its positions (outbox_draw, with the schema owner's rights),
--                  dead-letter refused rows, check the schema revision, read the
--                  database's identity and keep the published floor; `relay dead-letters`
--                  (list, replay, discard: replaying also needs outbox_writer's INSERT)
--   outbox_mirror  `relay mirror` and jobs/mirror.py: offsets and dead letters (also
--                  `relay dead-letters --mirror`: list, replay, discard); the
--                  mirrored tables are granted one by one (GRANT SELECT, INSERT, UPDATE,
--                  DELETE ON <table> TO outbox_mirror), e.g. in the table's migration
--
-- Creating a role needs CREATEROLE; when the roles exist already, the table owner can
-- run the grants alone. Give login roles membership: CREATE ROLE app LOGIN PASSWORD '...'
-- IN ROLE outbox_writer;
DO $$
DECLARE
  name text;
BEGIN
  FOREACH name IN ARRAY ARRAY['outbox_writer', 'outbox_relay', 'outbox_mirror'] LOOP
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = name) THEN
      EXECUTE format('CREATE ROLE %I NOLOGIN', name);
    END IF;
  END LOOP;
  EXECUTE format(
    'GRANT USAGE ON SCHEMA %I TO outbox_writer, outbox_relay, outbox_mirror', current_schema()
  );
END
$$;

GRANT INSERT ON outbox TO outbox_writer;

GRANT SELECT, DELETE ON outbox, outbox_commits TO outbox_relay;
GRANT SELECT ON outbox_positions, outbox_undrawn, outbox_draws TO outbox_relay;
GRANT EXECUTE ON FUNCTION outbox_draw() TO outbox_relay;
GRANT EXECUTE ON FUNCTION outbox_committed_tops(integer[]) TO outbox_relay;
GRANT EXECUTE ON FUNCTION outbox_horizon(integer) TO outbox_relay;
GRANT EXECUTE ON FUNCTION outbox_horizon_as_of(integer) TO outbox_relay;
GRANT SELECT ON outbox_settings, relay_alembic_version, relay_schema_compat TO outbox_relay;
GRANT SELECT ON SEQUENCE outbox_seq TO outbox_relay;
GRANT SELECT, INSERT, UPDATE, DELETE ON outbox_dead_letters TO outbox_relay;
GRANT SELECT ON outbox_identity TO outbox_relay;
GRANT SELECT, INSERT, UPDATE ON outbox_published_floor TO outbox_relay;
GRANT SELECT, INSERT, UPDATE, DELETE ON outbox_stalls TO outbox_relay;

GRANT SELECT ON relay_alembic_version, relay_schema_compat TO outbox_mirror;
GRANT SELECT, INSERT, UPDATE ON mirror_offsets TO outbox_mirror;
GRANT SELECT, INSERT, UPDATE, DELETE ON mirror_dead_letters TO outbox_mirror;
GRANT SELECT, INSERT, UPDATE ON mirror_heartbeats TO outbox_mirror;
GRANT SELECT, INSERT, DELETE ON mirror_table_topics TO outbox_mirror;
GRANT SELECT ON relay_mirror_freshness TO outbox_mirror;
