-- M003: a join reads only the window it keeps (issue #40). A member without a cursor starts at the
-- project's first row of its window (nmemd/team/pg.py, _WINDOW_START): the smallest seq of the
-- rows created since the window began, read from this index alone (created_at, then seq, of one
-- project) instead of every row of the project's history. An index only: every client works as before.
-- It is built while pushes wait (a few seconds per million rows; LOCK_TIMEOUT bounds the wait for it).
CREATE INDEX observations_team_project_created ON nmem.observations (team, project, created_at) INCLUDE (seq);
