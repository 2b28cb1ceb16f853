"""IPython/Jupyter: ``%load_ext gpushim`` and the ``%gpushim`` line magic.

The kernel must run under the tracer: ``gpushim kernel install`` writes a kernel spec that
starts ipykernel with ``libgpushim.so`` preloaded (``LD_PRELOAD`` cannot be set once a kernel
runs). Without it the magic says that tracing is off.

- After the extension is loaded, and after each cell, a snapshot is taken (``gpushim.snapshot``,
  labelled ``load`` and ``cellN`` with N the cell's execution count); cells that only run
  ``%gpushim`` are skipped. The snapshots are files in ``GPUSHIM_OUTPUT`` (default: the
  kernel's working directory).
- ``%gpushim snapshot [LABEL]``: a snapshot now; prints its path.
- ``%gpushim diff``: what the last cell left alive (``gpushim diff`` of the snapshots before and
  after it, then each grown site's line in a notebook cell: ``+8.0 MiB at In [4] line 2``);
  ``%gpushim diff LABEL``: what was left alive since the snapshot ``LABEL`` (one taken
  with ``%gpushim snapshot LABEL``, or ``cellN``). When the heap walk's files exist (CPython,
  ``GPUSHIM_HEAP_WALK`` not 0) the diff also lists the holders that grew, with their retention
  paths; the magic waits up to 5 s for them (the walk runs after each snapshot call returns).
- ``%gpushim report``: a snapshot now, shown as ``gpushim report`` shows it.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess

from gpushim import _api

#: Seconds the magic waits for each snapshot.
SNAPSHOT_TIMEOUT_S = 30.0
#: Seconds the diff waits for the snapshots' heap-walk files.
HOLDERS_WAIT_S = 5.0

_USAGE = "usage: %gpushim snapshot [LABEL] | diff [LABEL] | report"


class _Session:
    """The snapshots of this kernel, oldest first: (label as given, path)."""

    def __init__(self) -> None:
        self.snaps: list[tuple[str, str]] = []

    def take(self, label: str) -> str | None:
        path = _api.snapshot(label, timeout=SNAPSHOT_TIMEOUT_S)
        if path is not None:
            self.snaps.append((label, path))
        return path

    def find(self, label: str) -> str | None:
        for name, path in reversed(self.snaps):
            if name == label:
                return path
        return None


_session: _Session | None = None
_ipython = None


def _collector() -> str | None:
    """The ``gpushim`` executable: ``GPUSHIM_COLLECTOR`` (the kernel spec sets it), else PATH."""
    exe = os.environ.get("GPUSHIM_COLLECTOR")
    if exe and os.access(exe, os.X_OK):
        return exe
    return shutil.which("gpushim")


def _gpushim(*args: str) -> str:
    """The output of ``gpushim ARGS``, or why it could not run."""
    exe = _collector()
    if exe is None:
        return "gpushim: the gpushim executable was not found (GPUSHIM_COLLECTOR or PATH)"
    try:
        out = subprocess.run([exe, *args], capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.SubprocessError) as e:
        return f"gpushim: cannot run {exe}: {e}"
    return out.stdout + out.stderr


def _cell_lines(ipython, old: str, new: str) -> list[str]:
    """For each site that grew from ``old`` to ``new`` (``gpushim diff --format json``), the
    innermost frame in a notebook cell: ``+8.0 MiB at In [4] line 2``. IPython compiles each
    cell under a file name of its own (ipykernel: ``/tmp/ipykernel_PID/HASH.py``) and maps it
    to the cell's execution count (``compile._filename_map``; cells with the same source share
    one file, which maps to the latest of them)."""
    exe = _collector()
    if exe is None:
        return []
    try:
        out = subprocess.run(
            [exe, "diff", "--format", "json", "--top", "1000", old, new],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        sites = json.loads(out.stdout).get("sites", [])
    except (OSError, subprocess.SubprocessError, ValueError):
        return []
    cells = getattr(getattr(ipython, "compile", None), "_filename_map", None) or {}
    lines = []
    for s in sites:
        grown = s.get("growth_bytes", 0)
        if grown <= 0:
            continue
        for f in s.get("frames", []):
            file = f.get("file") or ""
            if f.get("python") and (file in cells or "/ipykernel_" in file):
                n = cells.get(file)
                where = f"In [{n}] line {f.get('line')}" if n is not None else f"{file} line {f.get('line')}"
                lines.append(f"  +{_api.fmt_bytes(grown)} at {where}")
                break
    return lines


def _wait_holders(*paths: str) -> None:
    if os.environ.get("GPUSHIM_HEAP_WALK") == "0":
        return
    for p in paths:
        _api.holders_path(p, timeout=HOLDERS_WAIT_S)


def _only_magic(cell: str | None) -> bool:
    lines = [line.strip() for line in (cell or "").splitlines() if line.strip()]
    return bool(lines) and all(line.startswith("%gpushim") for line in lines)


def _post_run_cell(result) -> None:
    """IPython's ``post_run_cell`` event: a snapshot labelled ``cellN``. Never raises."""
    try:
        if _session is None:
            return
        info = getattr(result, "info", None)
        if _only_magic(getattr(info, "raw_cell", None)):
            return
        n = getattr(result, "execution_count", None)
        _session.take(f"cell{n}" if n is not None else "cell")
    except Exception as e:
        print(f"gpushim: snapshot after the cell failed: {e!r}")


def gpushim_magic(line: str) -> None:
    """``%gpushim snapshot [LABEL] | diff [LABEL] | report`` (module docs)."""
    try:
        args = shlex.split(line)
    except ValueError as e:
        print(f"gpushim: {e}; {_USAGE}")
        return
    if not args:
        print(_USAGE)
        return
    if not _api.is_tracing() or _session is None:
        print(
            "gpushim: tracing is off in this kernel: start it from a kernel spec made by "
            "`gpushim kernel install` (LD_PRELOAD=libgpushim.so)"
        )
        return
    cmd, rest = args[0], args[1:]
    if cmd == "snapshot" and len(rest) <= 1:
        label = rest[0] if rest else "snapshot"
        path = _session.take(label)
        print(path if path else "gpushim: no snapshot written")
    elif cmd == "diff" and len(rest) <= 1:
        if rest:
            old = _session.find(rest[0])
            if old is None:
                known = ", ".join(dict.fromkeys(name for name, _ in _session.snaps))
                print(f"gpushim: no snapshot labelled {rest[0]!r} (known: {known})")
                return
            new = _session.snaps[-1][1]
        else:
            if len(_session.snaps) < 2:
                print("gpushim: no cell has run since the extension was loaded")
                return
            old, new = _session.snaps[-2][1], _session.snaps[-1][1]
        _wait_holders(old, new)
        print(_gpushim("diff", old, new))
        cells = _cell_lines(_ipython, old, new)
        if cells:
            print("left alive by notebook cells:")
            print("\n".join(cells))
    elif cmd == "report" and not rest:
        path = _session.take("report")
        if path is None:
            print("gpushim: no snapshot written")
            return
        _wait_holders(path)
        print(_gpushim("report", path))
    else:
        print(_USAGE)


def load(ipython) -> None:
    """Registers the magic and the snapshot after each cell, and takes the first snapshot."""
    global _session, _ipython
    _ipython = ipython
    ipython.register_magic_function(gpushim_magic, magic_kind="line", magic_name="gpushim")
    if not _api.is_tracing():
        print(
            "gpushim: tracing is off in this kernel: %gpushim does nothing. Install a kernel that runs under "
            "gpushim with `gpushim kernel install` and choose it."
        )
        return
    if _session is None:
        _session = _Session()
        ipython.events.register("post_run_cell", _post_run_cell)
    _session.take("load")


def unload(ipython) -> None:
    """Stops the snapshots after each cell."""
    global _session
    if _session is not None:
        ipython.events.unregister("post_run_cell", _post_run_cell)
        _session = None
