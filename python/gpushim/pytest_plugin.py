"""pytest plugin: the CUDA memory each test left live.

Enabled with ``pytest --gpushim`` (the wheel registers this module under the ``pytest11`` entry
point) or ``pytest -p gpushim.pytest_plugin --gpushim``; the process must run under gpushim
(``gpushim run -- pytest --gpushim``). Asked for and not traced, the run stops at once with one
line (pytest's usage error, exit status 4): a limit that checks nothing must not pass in CI.
``--gpushim-optional`` runs the tests anyway: the tests with a limit are skipped, each with the
reason, and the summary says tracing is off.

For each test, a snapshot (``gpushim.snapshot``) is taken just before and just after the test
function runs; the test's leak is the growth of live CUDA memory (device, managed and pinned host
bytes, ``totals.live_bytes``) between the two, and the site that grew most is named. The snapshots
go to a directory of the run's own (``gpushim-pytest-PID-XXXX`` in ``$TMPDIR``), removed when the
run ends: the working directory gets only the final report. Memory a
fixture allocates in setup and frees in teardown is therefore not counted; memory the test
function leaves to a fixture that keeps it is. A table of the tests that left memory live is
printed at the end.

``@pytest.mark.gpushim_limit_leaks("16 MiB")`` fails a test that leaves more than that live
(sizes: a number of bytes, or with B, KB, KiB, MB, MiB, GB, GiB).

Needs pytest 8 or later (a new-style hook wrapper around the test function's call).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile

import pytest

from gpushim import _api
from gpushim._api import fmt_bytes

_UNITS = {
    "": 1,
    "B": 1,
    "KB": 1000,
    "KIB": 1 << 10,
    "MB": 1000**2,
    "MIB": 1 << 20,
    "GB": 1000**3,
    "GIB": 1 << 30,
}


def parse_size(text: str | int) -> int:
    """Bytes in ``text`` (``16 MiB``, ``1.5GB``, ``4096``); ValueError if it is not a size."""
    if isinstance(text, int):
        return text
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*", str(text))
    if not m or m.group(2).upper() not in _UNITS:
        raise ValueError(f"{text!r} is not a size (like 16 MiB)")
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


def _read(path: str) -> dict | None:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _short(path: str) -> str:
    """A file named as the reports name it: its directory and its name (``/w/tests/test_a.py``:
    ``tests/test_a.py``)."""
    parts = path.split("/")
    return "/".join(parts[-2:]) if path.startswith("/") and len(parts) > 3 else path


def _where(site: dict, prefer: tuple[str, str] | None = None) -> str:
    """Where the site allocated, ``file:line (function)``: its frame of the test function
    (``prefer``: its file and name) if it has one, else its innermost frame outside CUDA and
    framework internals."""
    frames = [f for f in site.get("frames", []) if not f.get("internal")]
    if prefer:
        frames = [f for f in frames if (f.get("file"), f.get("function")) == prefer] or frames
    for f in frames:
        place = _short(f.get("file") or f.get("module") or "?")
        line = f.get("line")
        return f"{f.get('function', '?')} ({place}:{line})" if line else f"{f.get('function', '?')} ({place})"
    return "(no backtrace)"


def leak_between(before: dict, after: dict, prefer: tuple[str, str] | None = None) -> tuple[int, int, str | None]:
    """Growth of live bytes and live allocations from ``before`` to ``after`` (two snapshots of
    one process), and where the site that grew most allocated (see ``_where``)."""
    grown = after["totals"]["live_bytes"] - before["totals"]["live_bytes"]
    count = after["totals"]["live_count"] - before["totals"]["live_count"]
    old = {s["id"]: s["live_bytes"] for s in before.get("sites", [])}
    best, where = 0, None
    for s in after.get("sites", []):
        d = s["live_bytes"] - old.get(s["id"], 0)
        if d > best:
            best, where = d, _where(s, prefer)
    return grown, count, where


#: The line under the table: what it measures beside gpushim's report of the whole run.
_PER_TEST_VS_RUN = (
    "this table is each test's own growth (live CUDA memory after the test function, less before it); "
    "the leak suspects in gpushim's report at exit are of the whole run (places whose live memory kept "
    "rising over all the tests), so a test can leave memory here while the report has no suspect"
)


class _Plugin:
    """The per-run state: each test's result, in order."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.results: list[tuple[str, int, int, str | None]] = []
        self.tracing = _api.is_tracing()
        self.timeout = float(config.getoption("gpushim_timeout"))
        self.dir: str | None = None
        self.last: str | None = None
        if self.tracing:
            try:
                self.dir = tempfile.mkdtemp(prefix=f"gpushim-pytest-{os.getpid()}-")
            except OSError:
                self.dir = None  # the snapshots go to the output directory

    def _snap(self, label: str) -> dict | None:
        path = _api.snapshot(label, timeout=self.timeout, directory=self.dir)
        if path:
            self.last = path
        return _read(path) if path else None

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        """Removes the run's snapshots, once the last one's heap walk has written its file."""
        if self.dir is None:
            return
        if self.last is not None and os.environ.get("GPUSHIM_HEAP_WALK") != "0":
            _api.holders_path(self.last, timeout=2.0)
        with contextlib.suppress(Exception):
            shutil.rmtree(self.dir, ignore_errors=True)

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        if self.tracing:
            return
        skip = pytest.mark.skip(
            reason="gpushim: tracing is off, so this test's CUDA memory limit cannot be checked "
            "(run pytest under gpushim: gpushim run -- pytest --gpushim)"
        )
        for item in items:
            if item.get_closest_marker("gpushim_limit_leaks") is not None:
                item.add_marker(skip)

    @pytest.hookimpl(wrapper=True)
    def pytest_pyfunc_call(self, pyfuncitem: pytest.Function):
        if not self.tracing:
            return (yield)
        before = self._snap("before")
        result = yield
        after = self._snap("after")
        if before is None or after is None:
            return result
        grown, count, where = leak_between(before, after, (str(pyfuncitem.path), pyfuncitem.originalname))
        self.results.append((pyfuncitem.nodeid, grown, count, where))
        marker = pyfuncitem.get_closest_marker("gpushim_limit_leaks")
        if marker is not None and marker.args:
            limit = parse_size(marker.args[0])
            if grown > limit:
                at = f", most at {where}" if where else ""
                allocations = "1 allocation" if count == 1 else f"{count} allocations"
                pytest.fail(
                    f"gpushim: the test left {fmt_bytes(grown)} ({grown} bytes, {allocations}) of CUDA "
                    f"memory live, more than its limit of {fmt_bytes(limit)}{at}",
                    pytrace=False,
                )
        return result

    def pytest_terminal_summary(self, terminalreporter) -> None:
        tr = terminalreporter
        tr.section("gpushim: CUDA memory left live per test")
        if not self.tracing:
            tr.write_line("tracing is off: run pytest under gpushim (gpushim run -- pytest --gpushim)")
            return
        leaky = [r for r in self.results if r[1] > 0]
        if not leaky:
            tr.write_line(f"no test left CUDA memory live ({len(self.results)} measured)")
        else:
            tr.write_line(f"{'left live':>12} {'bytes':>12} {'allocs':>6}  test, at where it allocated")
            for nodeid, grown, count, where in sorted(leaky, key=lambda r: -r[1]):
                tr.write_line(f"{fmt_bytes(grown):>12} {grown:>12} {count:>6}  {nodeid}, at {where or '?'}")
        tr.write_line(_PER_TEST_VS_RUN)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("gpushim", "CUDA memory leaks (gpushim)")
    group.addoption(
        "--gpushim",
        action="store_true",
        default=False,
        help="report the CUDA memory each test left live (run pytest under `gpushim run`)",
    )
    group.addoption(
        "--gpushim-optional",
        action="store_true",
        default=False,
        help="with --gpushim outside gpushim: run anyway, skipping the tests with a gpushim_limit_leaks limit",
    )
    group.addoption(
        "--gpushim-timeout",
        default=30.0,
        type=float,
        help="seconds to wait for each snapshot (default 30)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "gpushim_limit_leaks(limit): fail the test if it leaves more than `limit` (like '16 MiB') of CUDA "
        "memory live (with --gpushim)",
    )
    if config.getoption("gpushim"):
        plugin = _Plugin(config)
        if not plugin.tracing and not config.getoption("gpushim_optional"):
            raise pytest.UsageError(
                "gpushim: --gpushim asked for, but this pytest is not traced: run it as "
                "`gpushim run -- pytest --gpushim` (or add --gpushim-optional to run untraced, "
                "skipping the tests with a CUDA memory limit)"
            )
        config.pluginmanager.register(plugin, "gpushim-plugin")
