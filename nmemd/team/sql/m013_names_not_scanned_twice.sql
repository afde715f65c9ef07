-- Team search whose names found whole are not looked for again through the trigrams (issue #40).
-- A function only, as M012's but for one step: no index built, the upgrade takes a moment.
--
-- M012 still asked the scoped trigram index, in a narrow scope (under 5 % of the newest rows),
-- when the names index found fewer rows than the limit. GIN steps each trigram's postings through
-- the scope's own (a rare author's in a large project: 32,708 rows at 10M), for a name's ten
-- trigrams or more: on 10M rows of real transcript text that scope's names took 110-264 ms, its
-- p99 207 ms (the whole team's 52). The names index holds a name and the runs that start or end a
-- longer one, so the trigrams found what it did not only where a name sits in the middle of a
-- longer token: they are now asked only for a name without a token of two parts (`src/api`).
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
  first CONSTANT int := 200;      -- the newest rows of the scope read first: a query half of them hold stops there
  glance CONSTANT int := 1000;    -- ... else read on down to these
  crowded CONSTANT int := 30;     -- ... holding the rarest word, that make the index's postings too long to read
  deep CONSTANT int := 2500;      -- the newest rows of the scope read instead of those postings
  names CONSTANT int := 6000;     -- the newest rows read for a name that a few of the first `glance` hold
  examine CONSTANT int := 1000;   -- rows holding a phrase's words read, at most, to find the phrase
  postings CONSTANT float8 := 40000;  -- index entries a scan may read whole (a word's, a narrow scope's)
  name_chars CONSTANT int := 12;      -- a name's first characters whose trigrams the index is asked for
  wide_share CONSTANT float8 := 0.05;  -- a scope holding this share of the newest rows: filtered, not indexed
  tq tsquery := websearch_to_tsquery('simple', p_query);
  wide tsquery;
  exact text := 'true';
  cap int := least(greatest(p_candidates, 1), 200);  -- whatever a client asks: ranking reads each one
  lim int := least(greatest(p_limit, 1), 200);
  enough int := greatest(2 * least(greatest(p_limit, 1), 200), 30);  -- matches that make a query common
  scope text := 'o.team = $1' || CASE WHEN p_project IS NULL THEN '' ELSE ' AND o.project = $2' END
                || CASE WHEN p_author IS NULL THEN '' ELSE ' AND o.author = $4' END;
  -- the same test on rows already read (that no index takes)
  filtered text := 'm.team = $1' || CASE WHEN p_project IS NULL THEN '' ELSE ' AND m.project = $2' END
                   || CASE WHEN p_author IS NULL THEN '' ELSE ' AND m.author = $4' END;
  name_test CONSTANT text := '(m.title ILIKE $7 OR array_to_string(m.files, '' '') ILIKE $7)';
  word_test CONSTANT text := 'ts_match_vq(m.tsv, $3)';
  once CONSTANT text := '(%s.tsv || ''''::tsvector)';  -- a tsvector decompressed there, once
  rare_sql text;
  rows_est float8;
  to_index boolean := false;      -- the words' postings are short: the index answers, no more walking
  gin_rows float8;                -- the postings an index scan would read
  name_like text;                 -- the name's first `name_chars` characters, as a LIKE pattern
  keys text[];                    -- the name's tokens held whole by the index of names (NULL: none)
  -- rows whose names hold the tokens $10 (the title's; a file's, each marked with a leading '/'),
  -- then tested for the whole name (a token may be part of a longer name in the text)
  by_name CONSTANT text := 'nmem.name_tokens(o.title, o.files) @> $10';
  title_has CONSTANT text := '(o.title || '''') ILIKE $7';
  files_have CONSTANT text := 'array_to_string(o.files, '' '') ILIKE $7';
  share float8 := 1;
  top bigint;
  bottom bigint;
  low bigint;
  below CONSTANT bigint := 9223372036854775807;
  got int := 0;
  more int;
  seen int;
  read int;
  words_got int := 0;
  rarest bigint;
  n bigint;
  reads int;
  seqs bigint[] := '{}';
  ranks real[] := '{}';
  s bigint[];
  r real[];
  -- a row's rank (as M001's): the words' cover density, plus 1 when the title holds the name, 0.5
  -- when a file does
  ranked CONSTANT text := $q$
    (ts_rank_cd(n.tsv, $3, 1) + CASE WHEN $7::text IS NULL THEN 0 WHEN n.title ILIKE $7 THEN 1.0
                                     WHEN array_to_string(n.files, ' ') ILIKE $7 THEN 0.5 ELSE 0 END)::real
  $q$;
  -- rows `m` read by the inner statement, each tested (`hit`) and ranked once (OFFSET 0: not
  -- flattened, so no test is repeated): the best $8 (seq, rank) of those that hit, how many hit,
  -- how many were read, the oldest seq read, and (the first %s) how many hold the rarest word
  best CONSTANT text := $q$
    SELECT coalesce((array_agg(c.seq ORDER BY c.r DESC, c.seq DESC) FILTER (WHERE c.hit))[1:$8], '{}'),
           coalesce((array_agg(c.r ORDER BY c.r DESC, c.seq DESC) FILTER (WHERE c.hit))[1:$8], '{}'),
           count(*) FILTER (WHERE c.hit)::int, count(*)::int, min(c.seq), %s
    FROM (SELECT n.seq, n.hit, CASE WHEN n.hit THEN %s END AS r, n.tsv
          FROM (SELECT m.seq, m.tsv, m.title, m.files, %s AS hit FROM (%s) m OFFSET 0) n OFFSET 0) c
  $q$;
  -- the scope's newest $6 rows below seq $9, down its (team[, project][, author], seq) index
  newest CONSTANT text := $q$
    SELECT o.seq, %s AS tsv, o.title, o.files, o.team, o.project, o.author FROM nmem.observations o
    WHERE %s AND o.seq < $9 ORDER BY o.seq DESC LIMIT $6
  $q$;
  -- at most $6 rows that the index says match (each one does, but for a phrase's order)
  indexed CONSTANT text := $q$
    SELECT w.seq, %s AS tsv, w.title, w.files, w.team, w.project, w.author FROM (
      SELECT o.seq, o.tsv, o.title, o.files, o.team, o.project, o.author FROM nmem.observations o
      WHERE %s LIMIT $6) w
  $q$;
BEGIN
  IF p_team IS NULL OR NOT (p_team = ANY (nmem.my_teams())) THEN
    RETURN;
  END IF;
  IF numnode(tq) > 0 THEN
    wide := tq;
    IF tq::text ~ '<[0-9]*->' AND tq::text !~ '!' THEN  -- a phrase: the index answers for its words
      wide := regexp_replace(tq::text, '<[0-9]*->', '&', 'g')::tsquery;
      exact := word_test;
    END IF;
    -- the newest rows: their matches ranked, and how many hold the rarest word; the first few,
    -- then (unless they held enough matches, or none held the rarest word) the next ones, down to
    -- `glance`
    rare_sql := (SELECT 'least(' || string_agg(format('count(*) FILTER (WHERE ts_match_vq(c.tsv, %L::tsquery))',
                                                       '''' || m[1] || ''''), ', ') || ')'
                 FROM regexp_matches(tq::text, '''((?:[^'']|'''')*)''', 'g') AS m);
    EXECUTE format(best, rare_sql, ranked, word_test, format(newest, format(once, 'o'), scope))
      INTO s, r, got, seen, bottom, rarest USING p_team, p_project, tq, p_author, wide, first, p_pattern, lim, below;
    seqs := seqs || s; ranks := ranks || r;
    -- none of the first held the rarest word: its postings are short (if the whole table holds it
    -- as seldom as the newest rows), the index answers without more walking
    to_index := rarest = 0 AND seen = first;
    IF got < enough AND seen = first AND NOT to_index THEN
      EXECUTE format(best, rare_sql, ranked, word_test, format(newest, format(once, 'o'), scope))
        INTO s, r, more, read, low, n USING p_team, p_project, tq, p_author, wide, glance - first, p_pattern, lim, bottom;
      seqs := seqs || s; ranks := ranks || r;
      got := got + more; seen := seen + read; rarest := rarest + n; bottom := coalesce(low, bottom);
    END IF;
    words_got := got;
    SELECT max(o.seq) INTO top FROM nmem.observations o;
    IF seen > 0 AND top > bottom THEN  -- the scope's share of the rows its newest ones span
      share := least(1, seen / ((top - bottom) / 65536.0 + 1));
    END IF;
    -- the postings an index scan would read, from the rarest word's share of the newest rows: the
    -- whole table's (the words' postings are not scoped), or the scope's when it is narrow (the
    -- scoped index intersects them)
    SELECT greatest(c.reltuples, 0) INTO rows_est FROM pg_class c WHERE c.oid = 'nmem.observations'::regclass;
    gin_rows := rarest::float8 / greatest(seen, 1) * rows_est;
    IF share < wide_share THEN
      gin_rows := least(gin_rows, share * rows_est);
    END IF;
    IF NOT to_index AND (got >= enough OR seen < glance) THEN
      NULL;  -- common (its best among the newest rows), or the scope has no more rows
    ELSIF NOT to_index AND (rarest >= crowded OR gin_rows > postings) THEN
      -- every word is common (a phrase of common words, common words seldom together), or the
      -- rarest one's postings are long: the scope's next newest rows answer instead, down to `deep`
      EXECUTE format(best, '0', ranked, word_test, format(newest, format(once, 'o'), scope))
        INTO s, r, more USING p_team, p_project, tq, p_author, wide, deep - seen, p_pattern, lim, bottom;
      seqs := seqs || s; ranks := ranks || r; words_got := got + more;
    ELSE
      PERFORM set_config('enable_indexscan', 'off', true), set_config('enable_seqscan', 'off', true);
      got := 0;
      read := 0;
      reads := least(ceil(cap / share), 2 * cap)::int;
      IF share >= wide_share AND exact = 'true' THEN
        -- a wide scope: the words alone in the index, the rows read filtered (not a phrase: its
        -- words' rows seldom hold it, the scoped index's `examine` rows answer instead)
        EXECUTE format(best, '0', ranked, filtered || ' AND ' || exact, format(indexed, format(once, 'w'), 'o.tsv @@ $5'))
          INTO s, r, got, read USING p_team, p_project, tq, p_author, wide, reads, p_pattern, lim, below;
        seqs := seqs || s; ranks := ranks || r; words_got := got;
      END IF;
      IF share < wide_share OR exact <> 'true' OR (got < enough AND read >= reads) THEN  -- the scope in the index
        EXECUTE format(best, '0', ranked, exact, format(indexed, format(once, 'w'), scope || ' AND o.tsv @@ $5'))
          INTO s, r, got USING p_team, p_project, tq, p_author, wide,
                               CASE WHEN exact = 'true' THEN cap ELSE examine END, p_pattern, lim, below;
        seqs := seqs || s; ranks := ranks || r; words_got := greatest(words_got, got);
      END IF;
      PERFORM set_config('enable_indexscan', 'on', true), set_config('enable_seqscan', 'on', true);
    END IF;
  END IF;
  IF p_pattern IS NOT NULL THEN
    -- the name's tokens that the index holds whole (none for a name such as `src/api`); and, for
    -- the trigram index, its first `name_chars` characters (each trigram of a long name costs as
    -- much as the commonest), the whole name tested on the rows they give (a test the index cannot
    -- take)
    SELECT array_agg(DISTINCT lower(m[1])) INTO keys
    FROM regexp_matches(regexp_replace(substr(p_pattern, 2, length(p_pattern) - 2), '\\(.)', '\1', 'g'),
                        '\w+(?:[.-]\w+)*', 'g') AS m
    WHERE cardinality(regexp_split_to_array(m[1], '(?<=[a-z])(?=[A-Z])|(?<=[_.-])(?=[^_.-])')) >= 2;
    name_like := substr(p_pattern, 2, length(p_pattern) - 2);
    IF length(name_like) > name_chars THEN
      name_like := left(name_like, name_chars);
      name_like := left(name_like, length(name_like) - length(substring(name_like FROM '\\*$')) % 2);
    END IF;
    name_like := quote_literal('%' || name_like || '%');
  END IF;
  IF p_pattern IS NOT NULL AND words_got < enough THEN
    -- a name: the newest rows holding it, deeper when a few of the first hold it (a scan of its
    -- trigrams would read every row holding them), else the index
    EXECUTE format(best, '0', ranked, name_test, format(newest, 'o.tsv', scope))
      INTO s, r, got, read, bottom USING p_team, p_project, tq, p_author, wide, glance, p_pattern, lim, below;
    seqs := seqs || s; ranks := ranks || r;
    IF got > 0 AND got < enough AND read = glance THEN
      EXECUTE format(best, '0', ranked, name_test, format(newest, 'o.tsv', scope))
        INTO s, r USING p_team, p_project, tq, p_author, wide, names - glance, p_pattern, lim, bottom;
      seqs := seqs || s; ranks := ranks || r;
    ELSIF got = 0 THEN
      -- titles first (a title's hit ranks above a file's), files only when titles held fewer
      -- than the limit: the names index, or (a name without a token of two parts) the trigrams
      PERFORM set_config('enable_indexscan', 'off', true), set_config('enable_seqscan', 'off', true);
      IF keys IS NOT NULL THEN
        EXECUTE format(best, '0', ranked, 'true', format(indexed, 'w.tsv', scope || ' AND ' || by_name || ' AND ' || title_has))
          INTO s, r, got USING p_team, p_project, tq, p_author, wide, cap, p_pattern, lim, below, keys;
        seqs := seqs || s; ranks := ranks || r;
        IF got < lim THEN
          EXECUTE format(best, '0', ranked, 'true', format(indexed, 'w.tsv', scope || ' AND ' || by_name || ' AND ' || files_have))
            INTO s, r, more USING p_team, p_project, tq, p_author, wide, cap, p_pattern, lim, below,
                                 ARRAY(SELECT '/' || k FROM unnest(keys) AS k);
          seqs := seqs || s; ranks := ranks || r; got := got + more;
        END IF;
      END IF;
      IF keys IS NULL THEN
        EXECUTE format(best, '0', ranked, 'true',
                       format(indexed, 'w.tsv', scope || ' AND o.title ILIKE ' || name_like || ' AND ' || title_has))
          INTO s, r, got USING p_team, p_project, tq, p_author, wide, cap, p_pattern, lim, below;
        seqs := seqs || s; ranks := ranks || r;
        IF got < lim THEN
          EXECUTE format(best, '0', ranked, 'true',
                         format(indexed, 'w.tsv', scope || ' AND nmem.files_text(o.files) ILIKE ' || name_like
                                                  || ' AND ' || files_have))
            INTO s, r USING p_team, p_project, tq, p_author, wide, cap, p_pattern, lim, below;
          seqs := seqs || s; ranks := ranks || r;
        END IF;
      END IF;
      PERFORM set_config('enable_indexscan', 'on', true), set_config('enable_seqscan', 'on', true);
    END IF;
  ELSIF p_pattern IS NOT NULL THEN
    -- enough rows hold the words, but a title holding the name ranks above them all: the newest
    -- rows' titles holding it, else (none of them does: a rare name) the titles' names, or (a name
    -- without a token of two parts) their trigrams, at most `cap` rows
    EXECUTE format(best, '0', ranked, 'm.title ILIKE $7', format(newest, 'o.tsv', scope))
      INTO s, r, got USING p_team, p_project, tq, p_author, wide, glance, p_pattern, lim, below;
    seqs := seqs || s; ranks := ranks || r;
    IF got = 0 THEN
      PERFORM set_config('enable_indexscan', 'off', true), set_config('enable_seqscan', 'off', true);
      IF keys IS NOT NULL THEN
        EXECUTE format(best, '0', ranked, 'true', format(indexed, 'w.tsv', scope || ' AND ' || by_name || ' AND ' || title_has))
          INTO s, r, got USING p_team, p_project, tq, p_author, wide, cap, p_pattern, lim, below, keys;
        seqs := seqs || s; ranks := ranks || r;
      END IF;
      IF keys IS NULL THEN
        EXECUTE format(best, '0', ranked, 'true',
                       format(indexed, 'w.tsv', scope || ' AND o.title ILIKE ' || name_like || ' AND ' || title_has))
          INTO s, r USING p_team, p_project, tq, p_author, wide, cap, p_pattern, lim, below;
        seqs := seqs || s; ranks := ranks || r;
      END IF;
      PERFORM set_config('enable_indexscan', 'on', true), set_config('enable_seqscan', 'on', true);
    END IF;
  END IF;
  RETURN QUERY EXECUTE $q$
    SELECT o.seq, o.event_id, o.author, o.agent, o.machine, o.session_id, o.kind, o.title,
           left(o.body, 4000), o.files, o.created_at, o.project, c.r
    FROM (SELECT DISTINCT ON (u.seq) u.seq, u.r FROM unnest($1, $2) AS u(seq, r) ORDER BY u.seq, u.r DESC) c
    JOIN nmem.observations o ON o.seq = c.seq
    ORDER BY c.r DESC, o.seq DESC
    LIMIT $3
  $q$ USING seqs, ranks, lim;
END $f$;
