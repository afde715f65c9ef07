-- M004: the times stored before v2 clamped as v2 clamps new ones (issue #36, finding 11): a row a
-- v1 server took with created_at `infinity`, `-infinity` or in the future (2099) would head every
-- newest-first list and break a client's float. Observations: the (team, project, created_at)
-- index of M003 finds them, one range scan at each end of each project (the projects are walked
-- along the index too), so a large table is not read whole; a future time becomes the time the row
-- reached the server. Sessions (one row a session): their own trigger clamps them on this UPDATE
-- and gives them a new seq, so members pull the corrected times.
WITH RECURSIVE projects AS (
  (SELECT o.team, o.project FROM nmem.observations o ORDER BY o.team, o.project LIMIT 1)
  UNION ALL
  SELECT n.team, n.project FROM projects p, LATERAL (
    SELECT o.team, o.project FROM nmem.observations o
     WHERE (o.team, o.project) > (p.team, p.project) ORDER BY o.team, o.project LIMIT 1) n
)
UPDATE nmem.observations o
   SET created_at = least(greatest(o.created_at, timestamptz '1970-01-01 00:00:00+00'), o.pushed_at)
 WHERE o.seq IN (
   SELECT x.seq FROM projects p, LATERAL (
     SELECT i.seq FROM nmem.observations i
      WHERE i.team = p.team AND i.project = p.project AND i.created_at > now()
     UNION ALL
     SELECT i.seq FROM nmem.observations i
      WHERE i.team = p.team AND i.project = p.project AND i.created_at < timestamptz '1970-01-01 00:00:00+00'
   ) x);

UPDATE nmem.sessions SET started_at = started_at
 WHERE started_at > now() OR started_at < timestamptz '1970-01-01 00:00:00+00'
    OR ended_at > now() OR ended_at < timestamptz '1970-01-01 00:00:00+00';
