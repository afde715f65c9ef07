"""Team memory: one project's memory shared through a PostgreSQL server (docs/team.md).

psycopg is imported only inside this package, and only once a project is shared or a
`nmem team` command runs: the default install and the daemon without team settings never load it.
"""
