-- M008: a push's observations take their seqs in one statement, under the team's lock taken once
-- (issue #36: the server's cost per pushed row back to v1's). Compatible with every older client.
--
-- Since v2 every observation took its seq in a per-row BEFORE trigger that called nmem.next_seq: a
-- SECURITY DEFINER function with its own search_path, reading the team's row of nmem.feeds to see
-- that this transaction holds its lock, then drawing from the team's sequence (~12 us a row, more
-- than the rest of v1's per-row work). nmem.push_observations does the same once a batch:
--   * it checks the writer is in the team (nmem.may_write), then locks the team's row of nmem.feeds
--     (FOR UPDATE, held until COMMIT), before any seq is drawn: the order guarantee is next_seq's;
--   * the INSERT draws each row's seq from the team's sequence in its select list, clamps
--     created_at to [1970, now()], and takes the author from session_user (the column's default):
--     the caller names the team, the machine and the rows' content, nothing else;
--   * the table's statement triggers run as for any insert: a tombstoned event is dropped before
--     the statement ends, the team's channel hears 'feed'; the size check is the table's.
-- The row trigger now fires only for a row without a seq: every member's raw INSERT (members have no
-- INSERT privilege on seq, and it has no default), so raw SQL and older clients get next_seq's lock
-- and clamp as before; a seq given by the caller means nmem.push_observations (or an operator, who
-- may write anything anyway).

-- The trigger's replacement needs this lock anyway: taken first, a push in flight finishes, the next waits.
LOCK TABLE nmem.observations IN ACCESS EXCLUSIVE MODE;

CREATE FUNCTION nmem.push_observations(p_team text, p_machine text, p_rows json) RETURNS int
  LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
  AS $f$
DECLARE
  s regclass;
  stored int;
BEGIN
  IF p_team IS NULL OR NOT nmem.may_write(p_team) THEN
    RAISE EXCEPTION 'not a member of team %', p_team USING ERRCODE = 'insufficient_privilege';
  END IF;
  SELECT f.seq INTO s FROM nmem.feeds f WHERE f.team = p_team FOR UPDATE;
  IF s IS NULL THEN
    RAISE EXCEPTION 'no team %', p_team USING ERRCODE = 'foreign_key_violation';
  END IF;
  INSERT INTO nmem.observations (seq, team, project, event_id, ordinal, machine, agent, session_id, kind, title,
                                 body, files, created_at)
  SELECT nextval(s), p_team, u.project, u.event_id, 0, p_machine, u.agent, u.session_id, u.kind, u.title, u.body,
         CASE WHEN u.file IS NULL THEN '{}'::text[] ELSE ARRAY[u.file] END,
         least(greatest(to_timestamp(u.created_at), timestamptz '1970-01-01 00:00:00+00'), now())
  FROM json_to_recordset(p_rows)
       AS u(project text, event_id text, agent text, session_id text, kind text, title text, body text, file text,
            created_at float8)
  ON CONFLICT DO NOTHING;
  GET DIAGNOSTICS stored = ROW_COUNT;
  RETURN stored;
END $f$;
REVOKE ALL ON FUNCTION nmem.push_observations(text, text, json) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION nmem.push_observations(text, text, json) TO nmem_member, nmem_admin;

DROP TRIGGER observations_seq ON nmem.observations;
CREATE TRIGGER observations_seq BEFORE INSERT ON nmem.observations
  FOR EACH ROW WHEN (NEW.seq IS NULL) EXECUTE FUNCTION nmem.admit_observation();
