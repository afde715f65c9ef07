-- M005: membership keyed by the role's OID, not its name (issue #36, findings 12 and 13). Roles are
-- cluster-wide and a name can come back: a role dropped outside nmem (or by another database's
-- admin) left a row keyed by its name, and the next role created with that name was a member of the
-- old team. Now a row names the role it was made for; a new role of the same name is no member.
-- Older clients and admins keep working: a trigger fills the OID from the name on insert.
ALTER TABLE nmem.members ADD COLUMN member_oid oid;
UPDATE nmem.members m SET member_oid = r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = m.member;
DELETE FROM nmem.members WHERE member_oid IS NULL;  -- a role that is gone: its rows named nobody
ALTER TABLE nmem.members ALTER COLUMN member_oid SET NOT NULL;
CREATE INDEX members_member_oid ON nmem.members (member_oid);

CREATE FUNCTION nmem.member_oid_of() RETURNS trigger
  LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
  AS $f$
BEGIN
  -- every write names the role of that name now: an admin's add-member of a new role that took an
  -- old name (ON CONFLICT ... DO UPDATE) makes the row that role's
  NEW.member_oid := (SELECT oid FROM pg_roles WHERE rolname = NEW.member);
  IF NEW.member_oid IS NULL THEN
    RAISE EXCEPTION 'no role %', NEW.member USING ERRCODE = 'undefined_object';
  END IF;
  RETURN NEW;
END $f$;
REVOKE ALL ON FUNCTION nmem.member_oid_of() FROM PUBLIC;
CREATE TRIGGER members_oid BEFORE INSERT OR UPDATE ON nmem.members
  FOR EACH ROW EXECUTE FUNCTION nmem.member_oid_of();

CREATE OR REPLACE FUNCTION nmem.my_teams() RETURNS text[]
  LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
  AS $f$ SELECT coalesce(array_agg(team), '{}') FROM nmem.members
         WHERE member_oid = (SELECT oid FROM pg_roles WHERE rolname = session_user) $f$;
CREATE OR REPLACE FUNCTION nmem.my_admin_teams() RETURNS text[]
  LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
  AS $f$ SELECT coalesce(array_agg(team), '{}') FROM nmem.members
         WHERE member_oid = (SELECT oid FROM pg_roles WHERE rolname = session_user) AND is_admin $f$;
