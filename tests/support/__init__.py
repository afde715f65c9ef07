"""What the tests share: the isolated environment, a real daemon, reads of its database, event builders,
the test data, and the worlds of the team and viewer tests. Test modules import from here, never from
conftest.py, nor from a test module of another layer."""
