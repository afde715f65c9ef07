-- M002: deletes as first-class rows of the protocol, and a server no login can stall or spy on.
-- Compatible with v1 clients: what they send still works (an older client does not send session
-- tombstones and hears no wake-ups: it pulls every 30 s).
--
-- * Order without a lock any login can take: each team has a row in nmem.feeds that only
--   nmem.next_seq locks (FOR UPDATE, after checking the writer is in the team; members have no
--   privilege that could lock it otherwise), then draws the row's seq from the team's own
--   sequence. The lock is held until COMMIT, so one team's writers become visible in seq order.
-- * A team's seqs say nothing of other teams: the team's sequence steps by 65536 from its own slot
--   (seq mod 65536), so seq stays unique across teams (the primary key stands) and the gaps a
--   member sees are the same whatever other teams write.
-- * Wake-ups on a per-team channel with a random name that only the team's members can read
--   (nmem.feeds.channel); a new name when a member is removed (the old channel hears 'rotated').
-- * Tombstones are checked and applied by the server, after the team's lock (so a push of the same
--   event in flight is committed and seen first): only for an event (or a session) the server
--   holds, in the project the tombstone names, by its author or an admin of the team. Nothing
--   held: nothing recorded. `target` is the author whose rows it removed; `project` where.
--   Members lose DELETE on observations and sessions: a tombstone is the only way to delete.
-- * A tombstoned event (or session) of that author is never inserted again.
-- * Sizes and times: every column of a feed row is bounded in bytes; created_at, started_at and
--   ended_at are clamped to [1970, now()] (no infinity, no 2099).

-- Every lock at once, in the order a push takes them (its rows, then the teams and members its
-- checks read): a push in flight finishes first, the next waits for this COMMIT, none deadlocks.
LOCK TABLE nmem.observations, nmem.sessions, nmem.tombstones, nmem.teams, nmem.members IN ACCESS EXCLUSIVE MODE;

-- The per-team feed --------------------------------------------------------------------------------

CREATE TABLE nmem.feeds (
  team text PRIMARY KEY REFERENCES nmem.teams ON DELETE CASCADE,
  slot int NOT NULL UNIQUE CHECK (slot BETWEEN 0 AND 65535),
  seq regclass NOT NULL,
  channel text NOT NULL UNIQUE
);

-- A team's sequence starts above every seq drawn so far (`floor`): cursors stay valid.
CREATE FUNCTION nmem.open_feed(p_team text, p_floor bigint) RETURNS void
  LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
  AS $f$
DECLARE
  free int;
  name text := 'feed_' || replace(gen_random_uuid()::text, '-', '');
  first bigint;
BEGIN
  SELECT s INTO free FROM generate_series(0, 65535) AS s
   WHERE s NOT IN (SELECT slot FROM nmem.feeds) ORDER BY random() LIMIT 1;
  IF free IS NULL THEN
    RAISE EXCEPTION 'this server holds 65,536 teams already' USING ERRCODE = 'program_limit_exceeded';
  END IF;
  first := (greatest(p_floor, 0) / 65536 + 1) * 65536 + free;
  EXECUTE format('CREATE SEQUENCE nmem.%I AS bigint INCREMENT BY 65536 MINVALUE %s START WITH %s', name, first, first);
  INSERT INTO nmem.feeds (team, slot, seq, channel)
  VALUES (p_team, free, ('nmem.' || quote_ident(name))::regclass,
          'nmem_' || replace(gen_random_uuid()::text, '-', ''));
END $f$;
REVOKE ALL ON FUNCTION nmem.open_feed(text, bigint) FROM PUBLIC;

CREATE FUNCTION nmem.team_created() RETURNS trigger
  LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
  AS $f$
BEGIN
  PERFORM nmem.open_feed(NEW.name, 0);
  RETURN NULL;
END $f$;
CREATE TRIGGER teams_feed AFTER INSERT ON nmem.teams FOR EACH ROW EXECUTE FUNCTION nmem.team_created();

SELECT nmem.open_feed(t.name, (SELECT last_value FROM nmem.feed_seq)) FROM nmem.teams t ORDER BY t.name;

-- The rotated channel: what a removed member knew names nothing any more.
CREATE FUNCTION nmem.member_removed() RETURNS trigger
  LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
  AS $f$
DECLARE
  old text;
BEGIN
  SELECT channel INTO old FROM nmem.feeds WHERE team = OLD.team FOR UPDATE;
  IF FOUND THEN
    UPDATE nmem.feeds SET channel = 'nmem_' || replace(gen_random_uuid()::text, '-', '') WHERE team = OLD.team;
    PERFORM pg_notify(old, 'rotated');
  END IF;
  RETURN NULL;
END $f$;
CREATE TRIGGER members_rotate AFTER DELETE ON nmem.members FOR EACH ROW EXECUTE FUNCTION nmem.member_removed();

-- The writer is in the team (or an operator), before any lock is taken on its behalf.
CREATE FUNCTION nmem.may_write(p_team text) RETURNS bool
  LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
  AS $f$ SELECT p_team = ANY (nmem.my_teams()) OR pg_has_role(session_user, 'nmem_admin', 'MEMBER') $f$;
REVOKE ALL ON FUNCTION nmem.may_write(text) FROM PUBLIC;

-- The team's lock, then its next seq. The first row of a transaction checks the writer is in the
-- team and locks the team's row; the next ones see the lock is their own transaction's (the row's
-- xmax: nothing a client can forge) and only draw. Members may call it: it locks and draws only
-- in their own teams, as an insert would.
CREATE FUNCTION nmem.next_seq(p_team text) RETURNS bigint
  LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
  AS $f$
DECLARE
  s regclass;
  mine bool;
BEGIN
  SELECT f.seq, f.xmax = xid(pg_current_xact_id()) INTO s, mine FROM nmem.feeds f WHERE f.team = p_team;
  IF mine IS NOT TRUE THEN
    IF NOT nmem.may_write(p_team) THEN
      RAISE EXCEPTION 'not a member of team %', p_team USING ERRCODE = 'insufficient_privilege';
    END IF;
    SELECT f.seq INTO s FROM nmem.feeds f WHERE f.team = p_team FOR UPDATE;
    IF s IS NULL THEN
      RAISE EXCEPTION 'no team %', p_team USING ERRCODE = 'foreign_key_violation';
    END IF;
  END IF;
  RETURN nextval(s);
END $f$;
REVOKE ALL ON FUNCTION nmem.next_seq(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION nmem.next_seq(text) TO nmem_member, nmem_admin;

CREATE FUNCTION nmem.clamp_time(t timestamptz) RETURNS timestamptz
  LANGUAGE sql STABLE PARALLEL SAFE
  AS $f$ SELECT CASE WHEN t IS NULL THEN NULL ELSE least(greatest(t, timestamptz '1970-01-01 00:00:00+00'), now()) END $f$;

-- Observations ---------------------------------------------------------------------------------

-- Per row, the writer's own rights (nothing here is anyone else's: every name is qualified), as
-- cheap as v1's: the seq and the clamp. Whether the event was tombstoned is asked once a statement,
-- below, for all its rows at once.
CREATE FUNCTION nmem.admit_observation() RETURNS trigger
  LANGUAGE plpgsql
  AS $f$
BEGIN
  NEW.seq := nmem.next_seq(NEW.team);
  NEW.created_at := least(greatest(NEW.created_at, '1970-01-01 00:00:00+00'::pg_catalog.timestamptz), pg_catalog.now());
  RETURN NEW;
END $f$;
-- Deleted for good: a re-push of a tombstoned event of that author (a crash in the ack window, a
-- rejoin) leaves nothing, its rows removed before the statement ends (no one else ever sees them).
CREATE FUNCTION nmem.drop_tombstoned() RETURNS trigger
  LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
  AS $f$
BEGIN
  DELETE FROM nmem.observations o USING new_rows n
   WHERE o.seq = n.seq AND EXISTS (
     SELECT 1 FROM nmem.tombstones t
      WHERE t.team = n.team AND t.kind = 'observation' AND t.event_id = n.event_id
        AND (t.target IS NULL OR t.target = n.author));
  RETURN NULL;
END $f$;
CREATE TRIGGER observations_tombstoned AFTER INSERT ON nmem.observations
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION nmem.drop_tombstoned();
DROP TRIGGER observations_seq ON nmem.observations;
CREATE TRIGGER observations_seq BEFORE INSERT ON nmem.observations
  FOR EACH ROW EXECUTE FUNCTION nmem.admit_observation();

ALTER TABLE nmem.observations ADD CONSTRAINT observations_size CHECK (
  octet_length(title) <= 8192 AND octet_length(body) <= 262144
  AND octet_length(nmem.files_text(files)) <= 65536 AND cardinality(files) <= 64
  AND octet_length(project) <= 1024 AND octet_length(event_id) <= 1024 AND octet_length(machine) <= 1024
  AND octet_length(agent) <= 1024 AND octet_length(session_id) <= 1024 AND octet_length(kind) <= 1024
) NOT VALID;

-- Sessions -------------------------------------------------------------------------------------

CREATE FUNCTION nmem.admit_session() RETURNS trigger
  LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
  AS $f$
BEGIN
  NEW.seq := nmem.next_seq(NEW.team);
  IF TG_OP = 'INSERT' AND EXISTS (
       SELECT 1 FROM nmem.tombstones t
       WHERE t.team = NEW.team AND t.kind = 'session' AND t.event_id = NEW.session_id
         AND (t.target IS NULL OR t.target = NEW.author)) THEN
    RETURN NULL;
  END IF;
  NEW.started_at := nmem.clamp_time(NEW.started_at);
  NEW.ended_at := nmem.clamp_time(NEW.ended_at);
  RETURN NEW;
END $f$;
DROP TRIGGER sessions_seq ON nmem.sessions;
CREATE TRIGGER sessions_seq BEFORE INSERT OR UPDATE ON nmem.sessions
  FOR EACH ROW EXECUTE FUNCTION nmem.admit_session();

ALTER TABLE nmem.sessions ADD CONSTRAINT sessions_size CHECK (
  octet_length(summary) <= 262144
  AND octet_length(project) <= 1024 AND octet_length(session_id) <= 1024
  AND octet_length(machine) <= 1024 AND octet_length(agent) <= 1024
) NOT VALID;

-- Tombstones -----------------------------------------------------------------------------------

ALTER TABLE nmem.tombstones
  ADD COLUMN kind text NOT NULL DEFAULT 'observation',
  ADD COLUMN project text,
  ADD COLUMN target name;
ALTER TABLE nmem.tombstones ADD CONSTRAINT tombstones_kind CHECK (kind IN ('observation', 'session')) NOT VALID;
ALTER TABLE nmem.tombstones ADD CONSTRAINT tombstones_size
  CHECK (octet_length(event_id) <= 1024 AND octet_length(project) <= 1024) NOT VALID;
ALTER TABLE nmem.tombstones DROP CONSTRAINT tombstones_team_event_id_key;
CREATE UNIQUE INDEX tombstones_target ON nmem.tombstones (team, kind, event_id, coalesce(target, ''));

-- Checked and applied here, after the team's lock: see the header. An admin's tombstone removes
-- the rows of one author (their own first); nothing held, nothing recorded (no error: a forget of a
-- row never pushed has nothing to do on the server).
CREATE FUNCTION nmem.admit_tombstone() RETURNS trigger
  LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
  AS $f$
DECLARE
  is_admin bool;
  found_project text;
  found_author name;
BEGIN
  NEW.seq := nmem.next_seq(NEW.team);
  NEW.author := session_user;
  NEW.deleted_at := now();
  is_admin := NEW.team = ANY (nmem.my_admin_teams()) OR pg_has_role(session_user, 'nmem_admin', 'MEMBER');
  IF NEW.kind = 'session' THEN
    SELECT s.project, s.author INTO found_project, found_author FROM nmem.sessions s
     WHERE s.team = NEW.team AND s.session_id = NEW.event_id AND (NEW.project IS NULL OR s.project = NEW.project)
     ORDER BY s.author = session_user DESC, s.seq LIMIT 1;
  ELSE
    SELECT o.project, o.author INTO found_project, found_author FROM nmem.observations o
     WHERE o.team = NEW.team AND o.event_id = NEW.event_id AND (NEW.project IS NULL OR o.project = NEW.project)
     ORDER BY o.author = session_user DESC, o.seq LIMIT 1;
  END IF;
  IF found_author IS NULL THEN
    RETURN NULL;
  END IF;
  IF found_author <> session_user AND NOT is_admin THEN
    RAISE EXCEPTION 'only its author or an admin of team % may delete it', NEW.team
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  NEW.project := found_project;
  NEW.target := found_author;
  IF NEW.kind = 'session' THEN
    DELETE FROM nmem.sessions
     WHERE team = NEW.team AND session_id = NEW.event_id AND project = found_project AND author = found_author;
  ELSE
    DELETE FROM nmem.observations
     WHERE team = NEW.team AND event_id = NEW.event_id AND project = found_project AND author = found_author;
  END IF;
  IF EXISTS (SELECT 1 FROM nmem.tombstones t WHERE t.team = NEW.team AND t.kind = NEW.kind
             AND t.event_id = NEW.event_id AND coalesce(t.target, '') = found_author) THEN
    RETURN NULL;  -- recorded already (its rows are gone again all the same)
  END IF;
  RETURN NEW;
END $f$;
DROP TRIGGER tombstones_apply ON nmem.tombstones;
DROP TRIGGER tombstones_seq ON nmem.tombstones;
DROP FUNCTION nmem.apply_tombstone();
CREATE TRIGGER tombstones_seq BEFORE INSERT ON nmem.tombstones
  FOR EACH ROW EXECUTE FUNCTION nmem.admit_tombstone();

DROP POLICY write ON nmem.tombstones;
CREATE POLICY write ON nmem.tombstones FOR INSERT TO nmem_member
  WITH CHECK (author = session_user AND team = ANY ((SELECT nmem.my_teams())::text[]));
GRANT INSERT (team, event_id, kind, project) ON nmem.tombstones TO nmem_member;

-- Wake-ups -----------------------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION nmem.notify_feed() RETURNS trigger
  LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
  AS $f$
BEGIN
  PERFORM pg_notify(f.channel, 'feed') FROM nmem.feeds f WHERE f.team IN (SELECT DISTINCT team FROM new_rows);
  RETURN NULL;
END $f$;

-- Privileges ---------------------------------------------------------------------------------------

-- Members delete through tombstones only: a DELETE privilege would also let any member of any team
-- `LOCK TABLE nmem.observations IN SHARE MODE` and stall every team's pushes.
REVOKE DELETE ON nmem.observations, nmem.sessions FROM nmem_member;
DROP POLICY remove ON nmem.observations;
DROP POLICY remove ON nmem.sessions;

REVOKE ALL ON nmem.feeds FROM PUBLIC;
GRANT SELECT ON nmem.feeds TO nmem_member;  -- the sequence it names stays unreadable to them
GRANT ALL ON nmem.feeds TO nmem_admin;
ALTER TABLE nmem.feeds ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
CREATE POLICY operator ON nmem.feeds TO nmem_admin USING (true) WITH CHECK (true);
CREATE POLICY read ON nmem.feeds FOR SELECT TO nmem_member USING (team = ANY ((SELECT nmem.my_teams())::text[]));
-- The shared sequence is no member's business any more: the triggers draw every seq.
ALTER TABLE nmem.observations ALTER COLUMN seq DROP DEFAULT;
ALTER TABLE nmem.sessions ALTER COLUMN seq DROP DEFAULT;
ALTER TABLE nmem.tombstones ALTER COLUMN seq DROP DEFAULT;
REVOKE ALL ON SEQUENCE nmem.feed_seq FROM nmem_member;
