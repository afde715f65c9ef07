-- Team search that bounds its work at any size and in any scope (issue #40).
--
-- The scope (team, project, author) is now inside every index a search reads, so no plan reads the
-- matches of other scopes and then throws them away:
--   * the walk of a scope's newest rows goes down (team, author, seq) or (team, project, author,
--     seq) as it went down (team, project, seq): a rare author's newest rows are theirs;
--   * the full-text and trigram indexes hold the scope's columns (btree_gin), so the index itself
--     intersects the words (or a name's trigrams) with the team, the project and the author; they
--     replace the indexes of the words and trigrams alone (a member's own queries, under row-level
--     security, could not use those either).
-- nmem.search() then takes its candidates from a scan whose LIMIT stops the reading of rows: a
-- bitmap scan of that index, every row of which matches (a phrase: the rows holding all its words,
-- at most `examine` of them, then checked for the phrase).
CREATE EXTENSION IF NOT EXISTS btree_gin WITH SCHEMA nmem;

CREATE INDEX IF NOT EXISTS observations_team_author_seq ON nmem.observations (team, author, seq);
CREATE INDEX IF NOT EXISTS observations_team_project_author_seq ON nmem.observations (team, project, author, seq);
CREATE INDEX IF NOT EXISTS observations_scope_tsv ON nmem.observations USING gin (team, project, author, tsv);
CREATE INDEX IF NOT EXISTS observations_scope_title_trgm
  ON nmem.observations USING gin (team, project, author, title gin_trgm_ops);
CREATE INDEX IF NOT EXISTS observations_scope_files_trgm
  ON nmem.observations USING gin (team, project, author, nmem.files_text(files) gin_trgm_ops);
DROP INDEX IF EXISTS nmem.observations_tsv;
DROP INDEX IF EXISTS nmem.observations_title_trgm;
DROP INDEX IF EXISTS nmem.observations_files_trgm;

CREATE OR REPLACE FUNCTION nmem.search(p_team text, p_project text, p_query text, p_pattern text, p_author name,
                                       p_candidates int, p_limit int)
  RETURNS TABLE (seq bigint, event_id text, author name, agent text, machine text, session_id text,
                 kind text, title text, body text, files text[], created_at timestamptz, project text,
                 rank real)
  LANGUAGE plpgsql STABLE SECURITY DEFINER
  -- restored when the function returns: the index branch turns plain index scans off for itself;
  -- random_page_cost as for a table in memory, else the walk of a scope's newest rows may go down
  -- the primary key (its heap order is sequential) and read past every row of other scopes
  SET search_path = pg_catalog, pg_temp SET enable_indexscan = on SET enable_seqscan = on SET work_mem = '32MB'
  SET random_page_cost = 1.1
  AS $f$
DECLARE
  glance CONSTANT int := 1000;    -- the newest rows of the scope read first
  dense CONSTANT int := 50;       -- matches among them that make a query common: they are its candidates
  crowded CONSTANT int := 30;     -- ... of its rarest word that make the index's postings too long to read
  deep CONSTANT int := 5000;      -- the newest rows of the scope read instead of those postings
  examine CONSTANT int := 1000;   -- rows holding a phrase's words read, at most, to find the phrase
  rarest bigint;
  tq tsquery := websearch_to_tsquery('simple', p_query);
  wide tsquery;
  exact text := 'true';
  cap int := least(greatest(p_candidates, 1), 2000);
  lim int := least(greatest(p_limit, 1), 200);
  scope text := 'o.team = $1' || CASE WHEN p_project IS NULL THEN '' ELSE ' AND o.project = $2' END
                || CASE WHEN p_author IS NULL THEN '' ELSE ' AND o.author = $4' END;
  found bigint[] := '{}';
  more bigint[] := '{}';
  -- the scope's newest $6 rows, down its (team[, project][, author], seq) index
  newest CONSTANT text := $q$
    SELECT coalesce(array_agg(r.seq), '{}') FROM (
      SELECT n.seq FROM (SELECT o.seq, o.tsv, o.title, o.files FROM nmem.observations o
                         WHERE %s ORDER BY o.seq DESC LIMIT $6) n
      WHERE %s LIMIT $5) r
  $q$;
  -- the scope's newest $6 rows once: those matching (at most $5), and how many hold the rarest word
  probe CONSTANT text := $q$
    SELECT coalesce((array_agg(n.seq ORDER BY n.seq DESC) FILTER (WHERE ts_match_vq(n.tsv, $3)))[1:$5], '{}'),
           least(%s)
    FROM (SELECT o.seq, o.tsv FROM nmem.observations o WHERE %s ORDER BY o.seq DESC LIMIT $6) n
  $q$;
  -- at most $6 rows the index says match (each one does, but for a phrase's order), then the exact test
  indexed CONSTANT text := $q$
    SELECT coalesce(array_agg(r.seq), '{}') FROM (
      SELECT w.seq FROM (SELECT o.seq, o.tsv FROM nmem.observations o WHERE %s AND %s LIMIT $6) w
      WHERE %s LIMIT $5) r
  $q$;
BEGIN
  IF p_team IS NULL OR NOT (p_team = ANY (nmem.my_teams())) THEN
    RETURN;
  END IF;
  IF numnode(tq) > 0 THEN
    wide := tq;
    IF tq::text ~ '<[0-9]*->' AND tq::text !~ '!' THEN  -- a phrase: the index answers for its words
      wide := regexp_replace(tq::text, '<[0-9]*->', '&', 'g')::tsquery;
      exact := 'ts_match_vq(w.tsv, $3)';
    END IF;
    EXECUTE format(probe, (SELECT string_agg(format('count(*) FILTER (WHERE ts_match_vq(n.tsv, %L::tsquery))',
                                                    '''' || m[1] || ''''), ', ')
                           FROM regexp_matches(tq::text, '''((?:[^'']|'''')*)''', 'g') AS m), scope)
      INTO found, rarest USING p_team, p_project, tq, p_author, cap, glance;
    IF cardinality(found) < dense AND rarest >= crowded THEN
      -- every word is common (a phrase of common words, common words seldom together): the index
      -- would read long postings; the scope's newest rows answer instead, as many as `deep`
      EXECUTE format(newest, scope, 'ts_match_vq(n.tsv, $3)') INTO found USING p_team, p_project, tq, p_author, cap, deep;
    ELSIF cardinality(found) < dense THEN
      PERFORM set_config('enable_indexscan', 'off', true), set_config('enable_seqscan', 'off', true);
      EXECUTE format(indexed, scope, 'o.tsv @@ $7', exact) INTO more
        USING p_team, p_project, tq, p_author, cap, CASE WHEN exact = 'true' THEN cap ELSE examine END, wide;
      PERFORM set_config('enable_indexscan', 'on', true), set_config('enable_seqscan', 'on', true);
      found := ARRAY(SELECT DISTINCT unnest(found || more));
    END IF;
  END IF;
  IF p_pattern IS NOT NULL AND cardinality(found) < lim THEN
    EXECUTE format(newest, scope, '(n.title ILIKE $3 OR nmem.files_text(n.files) ILIKE $3)')
      INTO more USING p_team, p_project, p_pattern, p_author, cap, glance;
    found := found || more;
    IF cardinality(more) < dense THEN
      PERFORM set_config('enable_indexscan', 'off', true), set_config('enable_seqscan', 'off', true);
      EXECUTE format(indexed, scope, '(o.title ILIKE $3 OR nmem.files_text(o.files) ILIKE $3)', 'true')
        INTO more USING p_team, p_project, p_pattern, p_author, cap, cap;
      PERFORM set_config('enable_indexscan', 'on', true), set_config('enable_seqscan', 'on', true);
      found := found || more;
    END IF;
  END IF;
  RETURN QUERY EXECUTE $q$
    SELECT o.seq, o.event_id, o.author, o.agent, o.machine, o.session_id, o.kind, o.title,
           left(o.body, 4000), o.files, o.created_at, o.project,
           (ts_rank_cd(o.tsv, $2, 1)
            + CASE WHEN $3::text IS NULL THEN 0 WHEN o.title ILIKE $3 THEN 1.0
                   WHEN nmem.files_text(o.files) ILIKE $3 THEN 0.5 ELSE 0 END)::real
    FROM nmem.observations o
    WHERE o.seq = ANY ($1)  -- duplicates in $1 match once
    ORDER BY 13 DESC, 1 DESC
    LIMIT $4
  $q$ USING found, tq, p_pattern, lim;
END $f$;
