"""What the tests share; a test module imports from here, never from conftest.py nor from another test module.

- `env`: where the code under test lives, and an nmem environment of a test's own.
- `daemon`: a real `nmemd` process, and the hook client run as installed hooks run it.
- `db`: reads of a store's file from outside the daemon, and the integrity checks.
- `store`: a store filled in process, through the real extractor, with no daemon.
- `host`: what the daemon lends the MCP server and the import methods, for running them in process.
- `helpers`: the `nmem` CLI as a user runs it, event builders, the wire protocol, waits.
- `fixtures`, `replay`: the invented payloads and transcripts of tests/data, the real captures beside the
  repository, and transcripts replayed as hook payloads.
- `payloads`: each agent's recorded (or documented) session.
- `checks`, `transcript_import`, `earlier_stores`, `snippet_session`, `mcp_client`: what two or more test
  modules run (the stored-as-extracted and worker checks, `nmem import-transcripts`, databases of earlier
  schema versions, a session of long tool output, an MCP client over the bridge).
- `pg_cluster`, `team_world`, `web_viewer`: a PostgreSQL cluster, team members, the viewer.
"""
