-- M010: nmem.push_observations (M008) belongs to the role that owns the teams' feeds. The function
-- calls nmem.may_write and draws from each team's sequence, both that role's (nmem.open_feed, M002,
-- creates every team's sequence as its own owner), but M008 created it as whoever ran that upgrade:
-- when they differed (v2 upgraded by a superuser, v8 by the tables' owner) every push through it
-- was refused ("permission denied for function may_write"). Nothing changes where one role ran
-- both, or where the function's owner is a superuser; otherwise only the feeds' owner (or a member
-- of it) or a superuser can make the change, and anyone else is told so.
DO $$
DECLARE
  feeds_owner regrole := (SELECT p.proowner::regrole FROM pg_catalog.pg_proc p
                           WHERE p.oid = 'nmem.open_feed(text, bigint)'::regprocedure);
  push_owner oid := (SELECT p.proowner FROM pg_catalog.pg_proc p
                      WHERE p.oid = 'nmem.push_observations(text, text, json)'::regprocedure);
BEGIN
  IF push_owner <> feeds_owner::oid
     AND NOT (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.oid = push_owner) THEN
    BEGIN
      EXECUTE format('ALTER FUNCTION nmem.push_observations(text, text, json) OWNER TO %s', feeds_owner);
    EXCEPTION WHEN insufficient_privilege THEN
      RAISE EXCEPTION 'this upgrade must run as % (the owner of the teams'' feeds) or a superuser', feeds_owner
        USING ERRCODE = 'insufficient_privilege';
    END;
  END IF;
END $$;
