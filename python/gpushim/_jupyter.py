"""IPython/Jupyter: ``%load_ext gpushim`` and the ``%gpushim`` line magic.

The kernel must run under the tracer: ``gpushim kernel install`` writes a kernel spec that
starts ipykernel with ``libgpushim.so`` preloaded (``LD_PRELOAD`` cannot be set once a kernel
runs). Without it the magic says that tracing is off.

- After the extension is loaded, and after each cell, a snapshot is taken (``gpushim.snapshot``,
  labelled ``load`` and ``cellN`` with N the cell's execution count); cells that only run
  ``%gpushim`` are skipped. These per-cell snapshots go into one directory of the kernel's own,
  ``gpushim-kernel-PID-XXXX`` in the temporary directory (``$TMPDIR``, else ``/tmp``), which
  is removed when the kernel ends unless ``%gpushim keep`` was run or
  ``GPUSHIM_KEEP_CELL_SNAPSHOTS`` is on. Such directories left by kernels that were killed (no
  process holds their lock file) are removed when the extension is next loaded.
- ``%gpushim snapshot [LABEL]``: a snapshot now, in ``GPUSHIM_OUTPUT`` (default: the kernel's
  working directory), the files the user asks for; prints its path.
- ``%gpushim keep``: keep the per-cell snapshots when the kernel ends; prints their directory.
- ``%gpushim diff``: what the last cell left alive (``gpushim diff`` of the snapshots before and
  after it, then each grown site's line in a notebook cell: ``+8.0 MiB at In [4] line 2``, the
  line of the cell that ran it, with the cell that defined the function, if another, after
  ``in``); at the end of a cell that also runs code, what that cell has left alive so far;
  ``%gpushim diff LABEL``: what was left alive since the snapshot ``LABEL`` (one taken
  with ``%gpushim snapshot LABEL``, or ``cellN``). When the heap walk's files exist (CPython,
  ``GPUSHIM_HEAP_WALK`` not 0) the diff also lists the holders that grew, with their retention
  paths; the magic waits up to 5 s for them (the walk runs after each snapshot call returns).
- ``%gpushim report``: a snapshot now (in ``GPUSHIM_OUTPUT``), shown as ``gpushim report``
  shows it.

In what the magic shows (the diff and the report), a place in a cell is named as the diff's
notebook lines name it, ``In [4] line 2`` (``_cell_name``), not by the file IPython compiled the
cell under (``ipykernel_4711/2849048635.py:2``). Only the kernel knows which cell a file is: the
magic writes each cell's name into the report files it leaves in the output directory
(``%gpushim snapshot`` and ``%gpushim report``: the frame's ``cell``, which ``gpushim report``
and the HTML page show), while the final report, which the collector writes after the kernel has
ended, and the collector's exit lines keep the file's name.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import tempfile

from gpushim import _api

#: Seconds the magic waits for each snapshot.
SNAPSHOT_TIMEOUT_S = 30.0
#: Seconds the diff waits for the snapshots' heap-walk files.
HOLDERS_WAIT_S = 5.0

_USAGE = "usage: %gpushim snapshot [LABEL] | diff [LABEL] | report | keep"
#: The per-cell snapshot directories' names: ``gpushim-kernel-PID-XXXX``.
_CELLS_PREFIX = "gpushim-kernel-"
_CELLS_NAME = re.compile(r"gpushim-kernel-(\d+)-[A-Za-z0-9_]+")


def _switch(name: str) -> bool:
    """A ``GPUSHIM_*`` switch (the grammar of wire/src/setting.rs); a bad value is said once and
    read as off."""
    raw = os.environ.get(name)
    if raw is None:
        return False
    v = raw.strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v not in ("0", "false", "no", "off"):
        print(f"gpushim: {name}={raw} is not a switch (1, on, yes, true or 0, off, no, false); it is off")
    return False


#: The file each kernel keeps locked (``flock``) in its per-cell directory while it runs.
_LOCK = ".lock"


def _remove_stale_cell_dirs(tmp: str) -> None:
    """Removes the per-cell snapshot directories in ``tmp`` that this user's kernels left when
    they were killed: those whose lock file no process holds (a lock, unlike a process id, is
    seen across PID namespaces and is not reused). A directory without the lock file (one kept
    with ``%gpushim keep``) is left alone. Never raises."""
    try:
        names = os.listdir(tmp)
    except OSError:
        return
    uid = os.getuid()
    for name in names:
        if _CELLS_NAME.fullmatch(name) is None:
            continue
        path = os.path.join(tmp, name)
        try:
            st = os.lstat(path)
            if st.st_uid != uid or not stat.S_ISDIR(st.st_mode):
                continue
            fd = os.open(os.path.join(path, _LOCK), os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # its kernel runs
        finally:
            os.close(fd)
        shutil.rmtree(path, ignore_errors=True)


class _Session:
    """The snapshots of this kernel, oldest first: (label as given, path), and the directory of
    its per-cell snapshots."""

    def __init__(self) -> None:
        self.snaps: list[tuple[str, str]] = []
        self.keep = _switch("GPUSHIM_KEEP_CELL_SNAPSHOTS")
        self.cells_dir: str | None = None
        tmp = tempfile.gettempdir()
        _remove_stale_cell_dirs(tmp)
        #: The lock file held while the kernel runs (closed, so released, when it ends).
        self.lock_fd: int | None = None
        try:
            self.cells_dir = tempfile.mkdtemp(prefix=f"{_CELLS_PREFIX}{os.getpid()}-", dir=tmp)
        except OSError as e:
            print(
                f"gpushim: cannot make a directory for the per-cell snapshots in {tmp}: {e}; "
                "they go to the output directory"
            )
        if self.cells_dir is not None:
            # Without it, a later kernel's clean-up leaves this directory alone.
            with contextlib.suppress(OSError):
                fd = os.open(os.path.join(self.cells_dir, _LOCK), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self.lock_fd = fd
        atexit.register(self.close)

    def take(self, label: str, keep: bool = True, cell: bool = False) -> str | None:
        """A snapshot labelled ``label``: a per-cell one (``cell``) in the kernel's directory,
        else in the output directory; remembered for ``diff`` when ``keep``."""
        where = self.cells_dir if cell else None
        path = _api.snapshot(label, timeout=SNAPSHOT_TIMEOUT_S, directory=where)
        if path is not None and not cell:
            _name_cells_in_file(path, _ipython)
        if path is not None and keep:
            self.snaps.append((label, path))
        return path

    def close(self) -> None:
        """At the kernel's end (or ``%unload_ext``): removes the per-cell snapshots unless asked
        to keep them. Never raises."""
        d, self.cells_dir = self.cells_dir, None
        fd, self.lock_fd = self.lock_fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
        if d is None:
            return
        if self.keep:
            with contextlib.suppress(Exception):
                # Without its lock file a kept directory is never taken for a killed kernel's.
                os.unlink(os.path.join(d, _LOCK))
                print(f"gpushim: the per-cell snapshots are kept in {d}")
            return
        with contextlib.suppress(Exception):
            shutil.rmtree(d, ignore_errors=True)

    def find(self, label: str) -> str | None:
        for name, path in reversed(self.snaps):
            if name == label:
                return path
        return None


_session: _Session | None = None
_ipython = None
#: The source of the cell running now (IPython's ``pre_run_cell``).
_running_cell: str | None = None


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


def _cells(ipython) -> dict:
    """IPython's map of each cell's file name to its execution count. IPython compiles each
    cell under a file name of its own (ipykernel: ``/tmp/ipykernel_PID/HASH.py``) and maps it
    to the cell's execution count (``compile._filename_map``; cells with the same source share
    one file, which maps to the latest of them)."""
    return getattr(getattr(ipython, "compile", None), "_filename_map", None) or {}


def _cell_name(file: str, line, cells: dict) -> str | None:
    """How a place in a notebook cell is named, in the diff's lines and in the reports shown in
    the notebook: ``In [4] line 2``; a cell file IPython no longer maps, by its file name; None
    for a file that is no cell's."""
    if not (file in cells or os.path.basename(os.path.dirname(file)).startswith("ipykernel_")):
        return None
    n = cells.get(file)
    return f"In [{n}] line {line}" if n is not None else f"{file} line {line}"


#: A cell's place as the collector's text names a file (its last two path components, then the
#: line): ``ipykernel_4711/2849048635.py:2``.
_CELL_PLACE = re.compile(r"(?<![\w/])(ipykernel_\d+/[\w.-]+\.py):(\d+)")


def _name_cells(text: str, ipython) -> str:
    """The collector's text (``gpushim report``, ``gpushim diff``) with each place in a notebook
    cell named as the diff's lines name it (``_cell_name``): ``<module> (In [4] line 2)``, not
    ``<module> (ipykernel_4711/2849048635.py:2)``."""
    cells = _cells(ipython)

    def name(m: re.Match) -> str:
        file = next((f for f in cells if f.endswith("/" + m.group(1))), None)
        got = _cell_name(file, m.group(2), cells) if file is not None else None
        return got or m.group(0)

    return _CELL_PLACE.sub(name, text)


def _name_cells_in_file(path: str, ipython) -> None:
    """Writes into the report at ``path`` each notebook cell's name on its Python frames, as
    ``_cell_name`` names it: ``"cell": "In [4] line 2"`` (docs/report-schema.md), which
    ``gpushim report`` and the HTML page show in place of IPython's file for the cell. The file
    is replaced in one rename, and left as it was when no frame is a cell's. Never raises."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        cells = _cells(ipython)
        stacks = [s.get("frames") for s in doc.get("sites") or []]
        stacks += [x.get("frames") for x in doc.get("failures") or []]
        stacks.append((doc.get("oom") or {}).get("frames"))
        named = 0
        for frames in stacks:
            for fr in frames or []:
                name = _cell_name(fr.get("file") or "", fr.get("line"), cells) if fr.get("python") else None
                if name is not None:
                    fr["cell"] = name
                    named += 1
        if named:
            tmp = path + ".tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(doc, f, ensure_ascii=False)
            os.replace(tmp, path)
    except Exception as e:
        print(f"gpushim: could not name the notebook cells in {path}: {e!r}")


def _cell_lines(ipython, old: str, new: str) -> list[str]:
    """For each site that grew from ``old`` to ``new`` (``gpushim diff --format json``), the
    innermost frame in a notebook cell, named by ``_cell_name``: ``+8.0 MiB at In [4] line 2``."""
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
    cells = _cells(ipython)

    def cell_of(f: dict) -> str | None:
        return _cell_name(f.get("file") or "", f.get("line"), cells) if f.get("python") else None

    lines = []
    for s in sites:
        grown = s.get("growth_bytes", 0)
        if grown <= 0:
            continue
        # Innermost first: the outermost cell frame is the cell that ran it, the innermost the
        # cell whose function allocated.
        found = [w for w in (cell_of(f) for f in s.get("frames", [])) if w is not None]
        if found:
            ran, made = found[-1], found[0]
            lines.append(f"  +{_api.fmt_bytes(grown)} at {ran}" + (f" (in {made})" if made != ran else ""))
    return lines


def _wait_holders(*paths: str) -> None:
    if os.environ.get("GPUSHIM_HEAP_WALK") == "0":
        return
    for p in paths:
        _api.holders_path(p, timeout=HOLDERS_WAIT_S)


def _only_magic(cell: str | None) -> bool:
    lines = [line.strip() for line in (cell or "").splitlines() if line.strip()]
    return bool(lines) and all(line.startswith("%gpushim") for line in lines)


def _pre_run_cell(info) -> None:
    """IPython's ``pre_run_cell`` event: the cell about to run. Never raises."""
    global _running_cell
    _running_cell = getattr(info, "raw_cell", None)


def _post_run_cell(result) -> None:
    """IPython's ``post_run_cell`` event: a snapshot labelled ``cellN``. Never raises."""
    try:
        if _session is None:
            return
        info = getattr(result, "info", None)
        if _only_magic(getattr(info, "raw_cell", None)):
            return
        n = getattr(result, "execution_count", None)
        _session.take(f"cell{n}" if n is not None else "cell", cell=True)
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
        elif _running_cell is not None and not _only_magic(_running_cell):
            # At the end of a cell that also runs code: what it has left alive so far, from the
            # snapshot after the previous cell to one taken now (not kept: the snapshot after
            # this cell follows it).
            old = _session.snaps[-1][1]
            new = _session.take("cell-so-far", keep=False, cell=True)
            if new is None:
                print("gpushim: no snapshot written")
                return
        else:
            if len(_session.snaps) < 2:
                print("gpushim: no cell has run since the extension was loaded")
                return
            old, new = _session.snaps[-2][1], _session.snaps[-1][1]
        _wait_holders(old, new)
        print(_name_cells(_gpushim("diff", old, new), _ipython))
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
        print(_name_cells(_gpushim("report", path), _ipython))
    elif cmd == "keep" and not rest:
        _session.keep = True
        if _session.cells_dir is None:
            print("gpushim: the per-cell snapshots are in the output directory")
        else:
            print(f"gpushim: the per-cell snapshots will be kept in {_session.cells_dir}")
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
        ipython.events.register("pre_run_cell", _pre_run_cell)
        ipython.events.register("post_run_cell", _post_run_cell)
    _session.take("load", cell=True)


def unload(ipython) -> None:
    """Stops the snapshots after each cell and removes the per-cell snapshots (unless kept)."""
    global _session
    if _session is not None:
        ipython.events.unregister("pre_run_cell", _pre_run_cell)
        ipython.events.unregister("post_run_cell", _post_run_cell)
        _session.close()
        atexit.unregister(_session.close)
        _session = None
