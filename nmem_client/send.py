"""nmem-send: the Claude Code hook client (its code: nmem_client.hook). Forwards stdin to nmemd, fails open.

Installed hooks run this file, `python -I -S /abs/path/nmem_client/send.py`, and it is kept
this short because Python compiles the file it runs on every run: the client's ~300 lines
cost ~1.5 ms of CPU each time, on every hook, where an imported module's bytecode is
cached in __pycache__ (issue #15).
"""

import posix
import sys

if __package__ in (None, ""):  # run as a file with -I -S: make the package importable
    _here = __file__ if __file__.startswith("/") else posix.getcwd() + "/" + __file__
    sys.path.insert(0, _here.rpartition("/")[0].rpartition("/")[0] or "/")

from nmem_client.hook import main  # noqa: E402  (the entry point; the code is nmem_client.hook's)

if __name__ == "__main__":
    main()
