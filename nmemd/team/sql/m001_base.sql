-- M001 (shipped in v1; never edit): teams, members, observations, sessions, tombstones; roles,
-- grants, row-level security, search. Run by nmemd.team.schema.migrate with search_path set to the
-- schema that holds pg_trgm (for gin_trgm_ops) and pg_catalog; every other name is qualified.
DO $$ BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'nmem_member') THEN
    CREATE ROLE nmem_member NOLOGIN;
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'nmem_admin') THEN
    CREATE ROLE nmem_admin NOLOGIN;
  END IF;
END $$;
GRANT nmem_admin TO CURRENT_USER;

REVOKE ALL ON SCHEMA nmem FROM PUBLIC;
GRANT USAGE ON SCHEMA nmem TO nmem_member, nmem_admin;

CREATE TABLE nmem.teams (
  name text PRIMARY KEY CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$'),
  created_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE nmem.members (
  team text NOT NULL REFERENCES nmem.teams ON DELETE CASCADE,
  member name NOT NULL,
  is_admin bool NOT NULL DEFAULT false,
  PRIMARY KEY (team, member)
);
CREATE INDEX members_member ON nmem.members (member);

CREATE FUNCTION nmem.my_teams() RETURNS text[]
  LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
  AS $f$ SELECT coalesce(array_agg(team), '{}') FROM nmem.members WHERE member = session_user $f$;
CREATE FUNCTION nmem.my_admin_teams() RETURNS text[]
  LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
  AS $f$ SELECT coalesce(array_agg(team), '{}') FROM nmem.members WHERE member = session_user AND is_admin $f$;
REVOKE ALL ON FUNCTION nmem.my_teams(), nmem.my_admin_teams() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION nmem.my_teams(), nmem.my_admin_teams() TO nmem_member, nmem_admin;

-- array_to_string is STABLE for anyarray; for text[] it is immutable, as an index needs.
CREATE FUNCTION nmem.files_text(text[]) RETURNS text
  LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
  AS $f$ SELECT array_to_string($1, ' ') $f$;

CREATE SEQUENCE nmem.feed_seq;

-- The per-team lock, then the seq: rows of one team become visible in seq order.
CREATE FUNCTION nmem.take_seq() RETURNS trigger
  LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
  AS $f$
BEGIN
  PERFORM pg_advisory_xact_lock(hashtext('nmem:' || NEW.team));
  NEW.seq := nextval('nmem.feed_seq');
  RETURN NEW;
END $f$;
CREATE FUNCTION nmem.notify_feed() RETURNS trigger
  LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
  AS $f$
BEGIN
  PERFORM pg_notify('nmem_feed', team) FROM (SELECT DISTINCT team FROM new_rows) AS t;
  RETURN NULL;
END $f$;

CREATE TABLE nmem.observations (
  seq bigint PRIMARY KEY DEFAULT nextval('nmem.feed_seq'),
  team text NOT NULL REFERENCES nmem.teams ON DELETE CASCADE,
  project text NOT NULL,
  event_id text NOT NULL,
  ordinal int NOT NULL DEFAULT 0,
  author name NOT NULL DEFAULT session_user,
  machine text NOT NULL,
  agent text NOT NULL,
  session_id text NOT NULL,
  kind text NOT NULL,
  title text NOT NULL,
  body text NOT NULL,
  files text[] NOT NULL DEFAULT '{}',
  created_at timestamptz NOT NULL,
  pushed_at timestamptz NOT NULL DEFAULT now(),
  tsv tsvector GENERATED ALWAYS AS (
    setweight(to_tsvector('simple'::regconfig, left(title, 10000)), 'A')
    || to_tsvector('simple'::regconfig, left(body || ' ' || nmem.files_text(files), 250000))
  ) STORED,
  UNIQUE (team, event_id, ordinal)
);
CREATE INDEX observations_team_seq ON nmem.observations (team, seq);
CREATE INDEX observations_team_project_seq ON nmem.observations (team, project, seq);
CREATE INDEX observations_tsv ON nmem.observations USING gin (tsv);
CREATE INDEX observations_title_trgm ON nmem.observations USING gin (title gin_trgm_ops);
CREATE INDEX observations_files_trgm ON nmem.observations USING gin (nmem.files_text(files) gin_trgm_ops);

CREATE TABLE nmem.sessions (
  seq bigint PRIMARY KEY DEFAULT nextval('nmem.feed_seq'),
  team text NOT NULL REFERENCES nmem.teams ON DELETE CASCADE,
  project text NOT NULL,
  session_id text NOT NULL,
  author name NOT NULL DEFAULT session_user,
  machine text NOT NULL,
  agent text NOT NULL,
  started_at timestamptz NOT NULL,
  ended_at timestamptz,
  summary text NOT NULL,
  UNIQUE (team, session_id, author)
);
CREATE INDEX sessions_team_seq ON nmem.sessions (team, seq);

CREATE TABLE nmem.tombstones (
  seq bigint PRIMARY KEY DEFAULT nextval('nmem.feed_seq'),
  team text NOT NULL REFERENCES nmem.teams ON DELETE CASCADE,
  event_id text NOT NULL,
  author name NOT NULL DEFAULT session_user,
  deleted_at timestamptz NOT NULL DEFAULT now(),
  UNIQUE (team, event_id)
);
CREATE INDEX tombstones_team_seq ON nmem.tombstones (team, seq);

-- A tombstone deletes its event's observations, as the one who inserted it (RLS applies).
CREATE FUNCTION nmem.apply_tombstone() RETURNS trigger
  LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
  AS $f$
BEGIN
  DELETE FROM nmem.observations WHERE team = NEW.team AND event_id = NEW.event_id;
  RETURN NULL;
END $f$;

CREATE TRIGGER observations_seq BEFORE INSERT ON nmem.observations FOR EACH ROW EXECUTE FUNCTION nmem.take_seq();
CREATE TRIGGER sessions_seq BEFORE INSERT OR UPDATE ON nmem.sessions FOR EACH ROW EXECUTE FUNCTION nmem.take_seq();
CREATE TRIGGER tombstones_seq BEFORE INSERT ON nmem.tombstones FOR EACH ROW EXECUTE FUNCTION nmem.take_seq();
CREATE TRIGGER tombstones_apply AFTER INSERT ON nmem.tombstones FOR EACH ROW EXECUTE FUNCTION nmem.apply_tombstone();
CREATE TRIGGER observations_notify AFTER INSERT ON nmem.observations
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION nmem.notify_feed();
CREATE TRIGGER sessions_notify_insert AFTER INSERT ON nmem.sessions
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION nmem.notify_feed();
CREATE TRIGGER sessions_notify_update AFTER UPDATE ON nmem.sessions
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION nmem.notify_feed();
CREATE TRIGGER tombstones_notify AFTER INSERT ON nmem.tombstones
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION nmem.notify_feed();

-- Search runs as the schema's owner: under RLS a member's own query could not use the GIN
-- indexes (@@ and ILIKE are not LEAKPROOF, so they may not run before the policy's filter).
-- The function checks the team itself, by session_user. Each EXECUTE ... USING is planned with
-- its values. A GIN scan reads every posting of its words, however many rows match: a word in 5 %
-- of 10 million rows costs ~0.3 s. So the newest rows are probed first: when 10 of the newest
-- 3,000 rows of the team (or project) match, the query is common and its candidates are taken
-- from the newest 30,000 rows (the newest first); the index is read only for rarer queries. (The
-- owner is under forced RLS, so pg_stats, which would say how common a word is, shows it nothing.)
-- The substring (trigram) branch runs only when the words found fewer than p_limit rows.
CREATE FUNCTION nmem.search(p_team text, p_project text, p_query text, p_pattern text, p_author name,
                            p_candidates int, p_limit int)
  RETURNS TABLE (seq bigint, event_id text, author name, agent text, machine text, session_id text,
                 kind text, title text, body text, files text[], created_at timestamptz, project text,
                 rank real)
  LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
  AS $f$
DECLARE
  glance CONSTANT int := 3000;   -- the newest rows a first probe reads
  common CONSTANT int := 10;     -- matches among them that make a query common
  recent CONSTANT int := 30000;  -- the newest rows a common query's candidates come from
  enough CONSTANT int := 100;    -- candidates from the newest rows that make the index needless
  tq tsquery := websearch_to_tsquery('simple', p_query);
  cap int := least(greatest(p_candidates, 1), 2000);
  lim int := least(greatest(p_limit, 1), 200);
  found bigint[] := '{}';
  more bigint[] := '{}';
  newest CONSTANT text := $q$
    SELECT coalesce(array_agg(r.seq), '{}') FROM (
      SELECT n.seq FROM (SELECT o.seq, o.tsv, o.title, o.files, o.author FROM nmem.observations o
                         WHERE o.team = $1 AND ($2::text IS NULL OR o.project = $2)
                         ORDER BY o.seq DESC LIMIT $6) n
      WHERE %s AND ($4::name IS NULL OR n.author = $4)
      LIMIT $5) r
  $q$;
  indexed CONSTANT text := $q$
    SELECT coalesce(array_agg(r.seq), '{}') FROM (
      SELECT o.seq FROM nmem.observations o
      WHERE o.team = $1 AND ($2::text IS NULL OR o.project = $2) AND ($4::name IS NULL OR o.author = $4)
        AND %s
      LIMIT $5) r
  $q$;
BEGIN
  IF p_team IS NULL OR NOT (p_team = ANY (nmem.my_teams())) THEN
    RETURN;
  END IF;
  IF numnode(tq) > 0 THEN
    EXECUTE format(newest, 'ts_match_vq(n.tsv, $3)') INTO found USING p_team, p_project, tq, p_author, common, glance;
    IF cardinality(found) >= common THEN
      EXECUTE format(newest, 'ts_match_vq(n.tsv, $3)') INTO found USING p_team, p_project, tq, p_author, cap, recent;
    END IF;
    IF cardinality(found) < enough THEN
      EXECUTE format(indexed, 'o.tsv @@ $3') INTO found USING p_team, p_project, tq, p_author, cap;
    END IF;
  END IF;
  IF p_pattern IS NOT NULL AND cardinality(found) < lim THEN
    EXECUTE format(newest, '(n.title ILIKE $3 OR nmem.files_text(n.files) ILIKE $3)')
      INTO more USING p_team, p_project, p_pattern, p_author, common, glance;
    IF cardinality(more) >= common THEN
      EXECUTE format(newest, '(n.title ILIKE $3 OR nmem.files_text(n.files) ILIKE $3)')
        INTO more USING p_team, p_project, p_pattern, p_author, cap, recent;
    END IF;
    IF cardinality(more) < enough THEN
      EXECUTE format(indexed, '(o.title ILIKE $3 OR nmem.files_text(o.files) ILIKE $3)')
        INTO more USING p_team, p_project, p_pattern, p_author, cap;
    END IF;
    found := found || more;
  END IF;
  RETURN QUERY EXECUTE $q$
    SELECT o.seq, o.event_id, o.author, o.agent, o.machine, o.session_id, o.kind, o.title,
           left(o.body, 4000), o.files, o.created_at, o.project,
           (ts_rank_cd(o.tsv, $2, 1)
            + CASE WHEN $3::text IS NULL THEN 0 WHEN o.title ILIKE $3 THEN 1.0
                   WHEN nmem.files_text(o.files) ILIKE $3 THEN 0.5 ELSE 0 END)::real
    FROM nmem.observations o
    WHERE o.seq = ANY ($1)
    ORDER BY 13 DESC, 1 DESC
    LIMIT $4
  $q$ USING found, tq, p_pattern, lim;
END $f$;
REVOKE ALL ON FUNCTION nmem.search(text, text, text, text, name, int, int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION nmem.search(text, text, text, text, name, int, int) TO nmem_member, nmem_admin;

-- Privileges: no column a member may write holds the author or the seq.
REVOKE ALL ON ALL TABLES IN SCHEMA nmem FROM PUBLIC;
GRANT SELECT ON nmem.schema_version, nmem.teams, nmem.members TO nmem_member;
GRANT SELECT, DELETE ON nmem.observations, nmem.sessions TO nmem_member;
GRANT INSERT (team, project, event_id, ordinal, machine, agent, session_id, kind, title, body, files, created_at)
  ON nmem.observations TO nmem_member;
GRANT INSERT (team, project, session_id, machine, agent, started_at, ended_at, summary),
  UPDATE (project, machine, agent, started_at, ended_at, summary) ON nmem.sessions TO nmem_member;
GRANT SELECT ON nmem.tombstones TO nmem_member;
GRANT INSERT (team, event_id) ON nmem.tombstones TO nmem_member;
GRANT USAGE ON SEQUENCE nmem.feed_seq TO nmem_member;
GRANT ALL ON ALL TABLES IN SCHEMA nmem TO nmem_admin;
GRANT ALL ON SEQUENCE nmem.feed_seq TO nmem_admin;

-- Row-level security on every table, the owner included.
ALTER TABLE nmem.schema_version ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
ALTER TABLE nmem.teams ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
ALTER TABLE nmem.members ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
ALTER TABLE nmem.observations ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
ALTER TABLE nmem.sessions ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
ALTER TABLE nmem.tombstones ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;

CREATE POLICY operator ON nmem.schema_version TO nmem_admin USING (true) WITH CHECK (true);
CREATE POLICY operator ON nmem.teams TO nmem_admin USING (true) WITH CHECK (true);
CREATE POLICY operator ON nmem.members TO nmem_admin USING (true) WITH CHECK (true);
CREATE POLICY operator ON nmem.observations TO nmem_admin USING (true) WITH CHECK (true);
CREATE POLICY operator ON nmem.sessions TO nmem_admin USING (true) WITH CHECK (true);
CREATE POLICY operator ON nmem.tombstones TO nmem_admin USING (true) WITH CHECK (true);

-- (SELECT nmem.my_teams()) is an InitPlan: the lookup runs once a statement, not once a row.
CREATE POLICY read ON nmem.schema_version FOR SELECT TO nmem_member USING (true);
CREATE POLICY read ON nmem.teams FOR SELECT TO nmem_member USING (name = ANY ((SELECT nmem.my_teams())::text[]));
CREATE POLICY read ON nmem.members FOR SELECT TO nmem_member USING (team = ANY ((SELECT nmem.my_teams())::text[]));

CREATE POLICY read ON nmem.observations FOR SELECT TO nmem_member
  USING (team = ANY ((SELECT nmem.my_teams())::text[]));
CREATE POLICY write ON nmem.observations FOR INSERT TO nmem_member
  WITH CHECK (author = session_user AND team = ANY ((SELECT nmem.my_teams())::text[]));
CREATE POLICY remove ON nmem.observations FOR DELETE TO nmem_member
  USING (team = ANY ((SELECT nmem.my_teams())::text[])
         AND (author = session_user OR team = ANY ((SELECT nmem.my_admin_teams())::text[])));

CREATE POLICY read ON nmem.sessions FOR SELECT TO nmem_member
  USING (team = ANY ((SELECT nmem.my_teams())::text[]));
CREATE POLICY write ON nmem.sessions FOR INSERT TO nmem_member
  WITH CHECK (author = session_user AND team = ANY ((SELECT nmem.my_teams())::text[]));
CREATE POLICY change ON nmem.sessions FOR UPDATE TO nmem_member
  USING (author = session_user AND team = ANY ((SELECT nmem.my_teams())::text[]))
  WITH CHECK (author = session_user AND team = ANY ((SELECT nmem.my_teams())::text[]));
CREATE POLICY remove ON nmem.sessions FOR DELETE TO nmem_member
  USING (team = ANY ((SELECT nmem.my_teams())::text[])
         AND (author = session_user OR team = ANY ((SELECT nmem.my_admin_teams())::text[])));

-- A tombstone for one's own event (or one not pushed yet), or for any event of a team one administers.
CREATE POLICY read ON nmem.tombstones FOR SELECT TO nmem_member
  USING (team = ANY ((SELECT nmem.my_teams())::text[]));
CREATE POLICY write ON nmem.tombstones FOR INSERT TO nmem_member
  WITH CHECK (
    author = session_user AND team = ANY ((SELECT nmem.my_teams())::text[])
    AND (team = ANY ((SELECT nmem.my_admin_teams())::text[])
         OR NOT EXISTS (SELECT 1 FROM nmem.observations o
                        WHERE o.team = tombstones.team AND o.event_id = tombstones.event_id
                          AND o.author <> session_user)));
