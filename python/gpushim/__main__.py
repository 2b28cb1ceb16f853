"""``python -m gpushim ARGS...``: runs the ``gpushim`` executable with the same arguments.

The executable replaces this Python process (``os.execv``): the process id, the signals it
receives, its standard streams and its exit status are the executable's own, exactly as when
``gpushim ARGS...`` is typed.
"""

from __future__ import annotations

import os
import sys

from gpushim._paths import collector_path


def main() -> None:
    try:
        exe = collector_path()
    except FileNotFoundError as e:
        print(e, file=sys.stderr)
        sys.exit(2)  # gpushim's exit code of usage errors
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(exe, ["gpushim", *sys.argv[1:]])


if __name__ == "__main__":
    main()
