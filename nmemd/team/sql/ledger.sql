-- Run after the migrations that an `nmem team init` applied (idempotent; the roles exist by then):
-- members read the ledger, as they read schema_version, to know whether they can use this server.
REVOKE ALL ON nmem.migrations FROM PUBLIC;
GRANT SELECT ON nmem.migrations TO nmem_member;
GRANT ALL ON nmem.migrations TO nmem_admin;
ALTER TABLE nmem.migrations ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS operator ON nmem.migrations;
CREATE POLICY operator ON nmem.migrations TO nmem_admin USING (true) WITH CHECK (true);
DROP POLICY IF EXISTS read ON nmem.migrations;
CREATE POLICY read ON nmem.migrations FOR SELECT TO nmem_member USING (true);
