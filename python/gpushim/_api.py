"""The Python API: ``snapshot``, ``is_tracing``, ``report_path``.

It talks to ``libgpushim.so`` through the C entry points the library exports
(``gpushim_snapshot``, ``gpushim_snapshot_in``, ``gpushim_is_tracing``, ``gpushim_report_path``),
found with ctypes in the
process's global symbols, where ``LD_PRELOAD`` (``gpushim run``, or a kernel spec written by
``gpushim kernel install``) put them. No signal is sent.

Without the library (the program was not started under gpushim) every function works and says
so: ``is_tracing()`` is False, ``snapshot()`` and ``report_path()`` return None, and one line on
standard error says that tracing is off. No function here ever raises: a failure is a None
result and one line on standard error.

A snapshot asked for from the main thread does not deadlock: the call waits (the GIL released,
as ctypes does for every foreign call) only for the snapshot file, which needs nothing from
Python. Its heap walk (who holds the memory, ``*.holders.json`` beside the snapshot) runs on the
main thread between two bytecodes once the call has returned, so that file appears a moment
later; ``holders_path(path, timeout)`` waits for it.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import os
import sys
import threading
import time

#: Seconds ``snapshot`` waits for the collector's confirmation by default.
DEFAULT_TIMEOUT_S = 30.0

# Results of gpushim_snapshot below 0 (shim/src/exports/api.rs).
_REASONS = {
    -1: "recording is off in this process (the collector could not be started or went away, or the program is exiting)",
    -2: "the collector did not confirm the snapshot in time (the file may still appear)",
    -3: "the collector could not write the snapshot",
    -4: "bad arguments",
}

_lock = threading.Lock()
_lib: ctypes.CDLL | None = None
_looked = False
_said: set[str] = set()


def _say(key: str, line: str) -> None:
    """Prints ``line`` on standard error once per ``key``; never raises."""
    if key in _said:
        return
    _said.add(key)
    # A closed or broken stderr: nothing else to do.
    with contextlib.suppress(Exception):
        print(f"gpushim: {line}", file=sys.stderr, flush=True)


def _library() -> ctypes.CDLL | None:
    """The process's global symbols if they hold the shim's entry points, else None."""
    global _lib, _looked
    with _lock:
        if _looked:
            return _lib
        _looked = True
        try:
            lib = ctypes.CDLL(None)  # dlopen(NULL): the program and every library in global scope
            lib.gpushim_is_tracing.restype = ctypes.c_int
            lib.gpushim_is_tracing.argtypes = []
            lib.gpushim_snapshot.restype = ctypes.c_ssize_t
            lib.gpushim_snapshot.argtypes = [ctypes.c_char_p, ctypes.c_uint32, ctypes.c_char_p, ctypes.c_size_t]
            lib.gpushim_report_path.restype = ctypes.c_ssize_t
            lib.gpushim_report_path.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
            _lib = lib
        except (OSError, AttributeError):
            _lib = None
        try:
            if _lib is not None:
                _lib.gpushim_snapshot_in.restype = ctypes.c_ssize_t
                _lib.gpushim_snapshot_in.argtypes = [
                    ctypes.c_char_p,
                    ctypes.c_char_p,
                    ctypes.c_uint32,
                    ctypes.c_char_p,
                    ctypes.c_size_t,
                ]
        except AttributeError:
            pass  # an older library: snapshots go to its output directory only
        return _lib


def _off() -> None:
    _say(
        "off",
        "tracing is off: libgpushim.so (with the Python API's entry points) is not loaded in this process "
        "(start it with `gpushim run -- python ...`, or LD_PRELOAD=$(gpushim preload-path)); "
        "gpushim.snapshot() does nothing",
    )


def _path_from(call) -> str | None:
    """Calls ``call(buf, cap)`` with a growing buffer until the path fits; None below 0."""
    cap = 4096
    for _ in range(4):
        buf = ctypes.create_string_buffer(cap)
        n = call(buf, cap)
        if n < 0:
            return None
        if n < cap:
            return os.fsdecode(buf.raw[:n])
        cap = n + 1
    return None


def is_tracing() -> bool:
    """True if ``libgpushim.so`` is loaded in this process and recording is on (or starts at
    the first CUDA allocation); False without the library or once recording stopped."""
    try:
        lib = _library()
        return bool(lib is not None and lib.gpushim_is_tracing() == 1)
    except Exception:
        return False


def report_path() -> str | None:
    """The path of the final report this process will get at exit (``GPUSHIM_OUTPUT`` or the
    working directory, ``gpushim-PID.json``, or ``gpushim-rankRRRRR-PID.json`` for a process with
    a rank, ``RANK`` or another launcher's variable, as the collector names it; the collector
    takes the next free name if that one exists), or None when tracing is off (one line on
    standard error says so)."""
    try:
        lib = _library()
        if lib is None:
            _off()
            return None
        return _path_from(lib.gpushim_report_path)
    except Exception as e:
        _say(f"report_path:{e!r}", f"report_path() failed: {e!r}")
        return None


def snapshot(label: str | None = None, timeout: float = DEFAULT_TIMEOUT_S, directory: str | None = None) -> str | None:
    """Writes a snapshot report of the CUDA memory live now and returns its path.

    ``label`` goes into the report (its ``label`` field) and into its file name,
    ``gpushim-PID-snapshot-N-LABEL.json``, reduced to at most 64 characters from
    ``[A-Za-z0-9._-]`` (others become ``_``). ``timeout`` is the longest wait, in seconds, for
    the collector to confirm that the file is written. ``directory``: where the snapshot's
    files go (default: ``GPUSHIM_OUTPUT``, else the working directory); the directory must
    exist. Starts tracing (the collector) if the program made no CUDA call yet, so that an
    empty baseline can be taken.

    Returns None, with one line on standard error, when tracing is off or the snapshot was not
    confirmed in time; never raises.
    """
    try:
        lib = _library()
        if lib is None:
            _off()
            return None
        raw = None if label is None else os.fsencode(str(label)).replace(b"\0", b"_")
        ms = int(min(max(float(timeout), 0.0) * 1000.0, 0xFFFFFFFF))
        rc = [0]
        where = None if directory is None else os.fsencode(os.path.abspath(directory))
        if where is not None and not hasattr(lib, "gpushim_snapshot_in"):
            _say("snapshot_in", "this libgpushim.so writes snapshots only to its output directory")
            where = None

        def call(buf, cap):
            if where is None:
                rc[0] = lib.gpushim_snapshot(raw, ms, buf, cap)
            else:
                rc[0] = lib.gpushim_snapshot_in(where, raw, ms, buf, cap)
            return rc[0]

        path = _path_from(call)
        if path is None:
            _say(f"snapshot:{rc[0]}", f"snapshot not written: {_REASONS.get(rc[0], f'error {rc[0]}')}")
        return path
    except Exception as e:
        _say(f"snapshot:{e!r}", f"snapshot() failed: {e!r}")
        return None


def holders_path(snapshot_path: str, timeout: float = 2.0) -> str | None:
    """The heap walk's companion file of a snapshot (``*.holders.json``: which Python objects
    hold its memory, CPython only), waiting up to ``timeout`` seconds for it to appear (the
    walk runs on the main thread after ``snapshot`` returned); None if it did not appear."""
    try:
        if not snapshot_path.endswith(".json"):
            return None
        p = snapshot_path[: -len(".json")] + ".holders.json"
        deadline = time.monotonic() + max(float(timeout), 0.0)
        while True:
            if os.path.exists(p):
                return p
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.02)
    except Exception:
        return None


def fmt_bytes(n: int) -> str:
    """``n`` bytes for a person: B, KiB, MiB, GiB or TiB, a tenth exactly half-way rounded up,
    as the collector writes sizes (``fmt_bytes`` in collector/src/report/words.rs)."""
    m = abs(n)
    if m < 1024:
        return f"{n} B"
    v, unit = float(m), 0
    while v >= 1024 and unit < 4:
        v /= 1024
        unit += 1
    sign = "-" if n < 0 else ""
    return f"{sign}{math.floor(v * 10 + 0.5) / 10:.1f} {('B', 'KiB', 'MiB', 'GiB', 'TiB')[unit]}"
