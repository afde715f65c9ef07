-- The rows' names (M012's `nmem.name_tokens`) taken at half the CPU or less, the very same arrays:
-- the index M012 built over them stays as it is, nothing is rebuilt, the upgrade takes a moment
-- (issue #40).
--
-- M012's function is one SQL query, and PostgreSQL starts an executor for it at every call: every
-- row a push inserts paid for its plan of set-returning scans, subqueries and an aggregate (13 us
-- even for a row without a name), and the push rate lost 27 % to it. Here the same steps are
-- PL/pgSQL statements over arrays, each a plain expression with no executor: the title's tokens
-- only when it holds what a name is made of (a lower-to-upper change, `_` or `.`/`-` between word
-- characters), each token split into its parts by M012's own expression, the runs of two parts or
-- more that start or end it. The tokens are those M012's `\w+(?:[.-]\w+)*` matched one after
-- another: the longest runs of word characters and of a `.` or `-` between two of them, what is
-- left once every run of other characters (a `.` or `-` without a word character on each side
-- among them) is split away. Names are sorted and kept once as M012's aggregate did, through a
-- tsvector where the collation agrees with its byte order, else by M012's query. On rows of real
-- transcript text 18 us a row instead of 39, on bench_team_sync.py's push rows 5 instead of 19; the
-- server's CPU per pushed row ~0.8x v13's. bench/bench_team_name_tokens.py compares both functions
-- on every row of a team grown from the corpus; tests/daemon/test_team_server_names.py on texts
-- shaped like an agent's, in three collations.
CREATE OR REPLACE FUNCTION nmem.name_tokens(p_title text, p_files text[]) RETURNS text[]
  LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
  -- every name qualified, operators too: an index expression runs with the writer's search_path
  -- (a SET clause instead would cost each call a third of the rest)
  AS $f$
DECLARE
  source pg_catalog.text;
  mark pg_catalog.text := '';
  token pg_catalog.text;
  parts pg_catalog.text[];
  n pg_catalog.int4;
  names pg_catalog.text[] := '{}';
BEGIN
  FOR pass IN 1..2 LOOP
    IF pass OPERATOR(pg_catalog.=) 1 THEN
      source := p_title;
      -- a title without a name's makings splits no further (a file's path nearly always has one)
      CONTINUE WHEN source OPERATOR(pg_catalog.!~) '[a-z][A-Z]|_[[:alnum:]]|\w[.-][[:alnum:]]';
    ELSE
      source := pg_catalog.array_to_string(p_files, ' ');
      mark := '/';
    END IF;
    CONTINUE WHEN source IS NULL OR source OPERATOR(pg_catalog.=) '';  -- no files: no tokens
    FOREACH token IN ARRAY pg_catalog.regexp_split_to_array(source, '(?:[^\w.-]|(?<!\w)[.-]|[.-](?!\w))+') LOOP
      -- its parts, each with the separators after it: CoderService.ts -> {Coder, Service., ts}
      parts := pg_catalog.regexp_split_to_array(token, '(?<=[a-z])(?=[A-Z])|(?<=[_.-])(?=[^_.-])');
      n := pg_catalog.cardinality(parts);
      CONTINUE WHEN n OPERATOR(pg_catalog.<) 2;  -- a word alone is not a name (nor the '' at either end)
      -- the whole token, and the runs of two parts or more that start or end it
      names := pg_catalog.array_append(names, mark OPERATOR(pg_catalog.||) pg_catalog.lower(token));
      FOR i IN 2..n OPERATOR(pg_catalog.-) 1 LOOP
        names := pg_catalog.array_append(names,
          mark OPERATOR(pg_catalog.||) pg_catalog.lower(pg_catalog.array_to_string(parts[i:], '')));
        names := pg_catalog.array_append(names,
          mark OPERATOR(pg_catalog.||) pg_catalog.lower(pg_catalog.rtrim(pg_catalog.array_to_string(parts[:i], ''), '_.-')));
      END LOOP;
    END LOOP;
  END LOOP;
  n := pg_catalog.cardinality(names);
  IF n OPERATOR(pg_catalog.<) 2 THEN
    RETURN CASE WHEN n OPERATOR(pg_catalog.=) 1 THEN names END;  -- none: NULL, as M012's aggregate of no row
  END IF;
  -- sorted, each once, as M012's array_agg(DISTINCT ...) under the column's collation: a tsvector
  -- holds its lexemes each once in byte order, which is that order when each is below the next in
  -- it (C, C.UTF-8: always); else, or past a tsvector's limits (a lexeme's 2,047 bytes), M012's query
  IF pg_catalog.octet_length(pg_catalog.array_to_string(names, '')) OPERATOR(pg_catalog.<) 2047 THEN
    parts := pg_catalog.tsvector_to_array(pg_catalog.array_to_tsvector(names));
    FOR i IN 2..pg_catalog.cardinality(parts) LOOP
      IF parts[i OPERATOR(pg_catalog.-) 1] OPERATOR(pg_catalog.>=) parts[i] THEN
        RETURN (SELECT pg_catalog.array_agg(DISTINCT x) FROM pg_catalog.unnest(names) AS x);
      END IF;
    END LOOP;
    RETURN parts;
  END IF;
  RETURN (SELECT pg_catalog.array_agg(DISTINCT x) FROM pg_catalog.unnest(names) AS x);
END
$f$;
