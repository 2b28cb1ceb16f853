"""Runs the same invocations of two builds of gpushim (a baseline and this tree) and compares what
they write: stdout, stderr, exit status and every file they leave. scripts/compare-outputs.sh
builds both and calls this.

Four groups of invocations:
- replay: event streams recorded once (each program run under the shim with a stand-in
  collector that only saves the stream) are read by both collectors with `gpushim collect
  --input`, under several settings; the same input gives byte-identical reports, snapshots,
  out-of-memory, interval, holders, reachability and HTML files, and stderr (the output
  directory's path is the only difference);
- report and diff: every report the replays wrote is rendered by both builds in every format
  (and the text format with other options), the job view of each output directory, and
  `gpushim diff` of consecutive reports in text, JSON and HTML: the same input, byte-identical;
- run: `gpushim run` of the stand-in examples and test programs, each build with its own shim
  and stand-ins, compared after normalising what differs from run to run (pids, times,
  durations, rates, addresses, paths);
- snapshot: `gpushim snapshot PID` of a program that waits, normalised the same way.

Prints one line per difference (with a unified diff of the first few) and a summary line with
the number of invocations compared; exits 1 when any differ.
"""

import argparse
import difflib
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

FORMATS = ["text", "json", "folded", "svg", "perfetto", "html", "torch-snapshot"]

# (name, program in the stand-ins directory, arguments). Programs that end on their own.
PROGRAMS = [
    ("leak-example", "leak_example", ["40"]),
    ("leak-example-big", "leak_example", ["200"]),
    ("kinds", "target_dynamic", ["kinds"]),
    ("kinds-static", "target_static", ["kinds"]),
    ("leak", "target_dynamic", ["leak", "30"]),
    ("leak-static", "target_static", ["leak", "12"]),
    ("threads", "target_dynamic", ["threads", "4", "50"]),
    ("snapshot", "target_dynamic", ["snapshot"]),
    ("errors", "target_dynamic", ["errors"]),
    ("burst", "target_dynamic", ["burst", "20"]),
    ("churn", "target_dynamic", ["churn"]),
    ("fork", "target_dynamic", ["fork"]),
    ("forkexec", "target_dynamic", ["forkexec"]),
    ("query", "target_dynamic", ["query"]),
    ("alloca-paths", "target_dynamic", ["alloca-paths"]),
    ("paths", "target_dynamic", ["paths", "200"]),
    ("ring-threads", "target_dynamic", ["ring-threads", "8", "200"]),
    ("threads-program", "threads", []),
]

# Programs whose threads race or that count what the scheduler did: their runs differ from one run
# to the next in any build (their recorded streams are still compared in the replays).
RUN_TO_RUN = {"threads", "threads-program", "burst", "ring-threads", "paths"}

# Settings the collector reads, for the replays: none, then each kind of report and bound, then
# values it does not take (said in one line each).
SETTINGS = [
    {},
    {"GPUSHIM_HTML": "1"},
    {"GPUSHIM_REPORT_INTERVAL": "0.001", "GPUSHIM_REPORT_KEEP": "2"},
    {"GPUSHIM_MAX_STACKS": "2", "GPUSHIM_REORDER_MIB": "1"},
    {"GPUSHIM_USER_MODULES": "*target*", "GPUSHIM_INTERNAL_MODULES": "libcuda*", "GPUSHIM_DEFAULT_SUPPRESSIONS": "0"},
    {
        "GPUSHIM_HTML": "x",
        "GPUSHIM_NVML": "maybe",
        "GPUSHIM_NVML_INTERVAL_MS": "0",
        "GPUSHIM_REPORT_INTERVAL": "soon",
        "GPUSHIM_MAX_STACKS": "lots",
        "GPUSHIM_METRICS_TOP": "x",
    },
]

# Settings of the traced program and its collector, for the runs.
RUN_SETTINGS = [{}, {"GPUSHIM_BACKTRACE": "0"}, {"GPUSHIM_HTML": "1", "GPUSHIM_MAX_FRAMES": "4"}]

# Variables of the caller that would change what either build does.
CLEARED = [k for k in os.environ if k.startswith("GPUSHIM_")] + ["LD_PRELOAD"]


class Side:
    """One build: its gpushim, libgpushim.so and stand-ins directory."""

    def __init__(self, name, target, src):
        self.name = name
        self.src = src
        self.bin = target / "debug" / "gpushim"
        self.lib = target / "debug" / "libgpushim.so"
        builds = sorted(
            (target / "debug" / "build").glob("gpushim-tests-*/out/standins/leak_example"),
            key=lambda p: p.stat().st_mtime,
        )
        if not builds or not self.bin.exists():
            sys.exit(f"compare_outputs: no build in {target} (cargo build --workspace)")
        self.standins = builds[-1].parent


class Compare:
    def __init__(self, work, sides):
        self.work = work
        self.base, self.new = sides
        self.count = 0
        self.differ = []

    def env(self, extra=None, side=None):
        env = {k: v for k, v in os.environ.items() if k not in CLEARED}
        env["GPUSHIM_NVML"] = "0"
        if side is not None:
            env["LD_LIBRARY_PATH"] = str(side.standins)
            env["GPUSHIM_COLLECTOR"] = str(side.bin)
        env.update(extra or {})
        return env

    def run(self, args, cwd, env, stdin=None, timeout=120):
        p = subprocess.run(args, cwd=cwd, env=env, input=stdin, capture_output=True, timeout=timeout, check=False)
        return p.returncode, p.stdout, p.stderr

    def check(self, what, a, b):
        """Counts one invocation and records it when the two outputs differ."""
        self.count += 1
        if a != b:
            self.differ.append((what, a, b))

    # ------------------------------------------------------------------ recording streams

    def record(self, side):
        """Runs each program under `side`'s shim with a collector that saves the stream."""
        rec = self.work / "streams"
        shutil.rmtree(rec, ignore_errors=True)
        rec.mkdir(parents=True)
        saver = self.work / "save-stream.sh"
        # One file per collector: a forked child's stream is a stream of its own.
        saver.write_text('#!/bin/sh\nexec cat > "$COMPARE_STREAM-$$.bin"\n')
        saver.chmod(0o755)
        streams = []
        for name, prog, args in PROGRAMS:
            out = rec / f"{name}@"
            cwd = self.work / "record-cwd" / name
            cwd.mkdir(parents=True, exist_ok=True)
            env = self.env(
                {
                    "LD_PRELOAD": str(side.lib),
                    "GPUSHIM_COLLECTOR": str(saver),
                    "GPUSHIM_EXIT_TIMEOUT": "1",
                    "COMPARE_STREAM": str(out),
                },
                side,
            )
            env["LD_LIBRARY_PATH"] = str(side.standins)
            self.run([str(side.standins / prog), *args], cwd, env)
            for n, f in enumerate(sorted(rec.glob(f"{name}@-*.bin"), key=lambda p: p.stat().st_mtime)):
                if f.stat().st_size > 0:
                    streams.append(f.rename(rec / f"{name}.{n}.bin"))
        return streams

    # ------------------------------------------------------------------ identical inputs

    def files(self, d, placeholder):
        """Every file under `d` by relative name, its text with `d` as `placeholder`."""
        out = {}
        for p in sorted(d.rglob("*")):
            if p.is_file():
                out[str(p.relative_to(d))] = p.read_bytes().replace(str(d).encode(), placeholder)
        return out

    def replay(self, streams):
        reports = []
        for stream in streams:
            for n, settings in enumerate(SETTINGS):
                outs = []
                for side in (self.base, self.new):
                    d = self.work / "replay" / side.name / f"{stream.stem}-{n}"
                    shutil.rmtree(d, ignore_errors=True)
                    d.mkdir(parents=True)
                    rc, so, se = self.run(
                        [str(side.bin), "collect", "--input", str(stream), "--output", str(d)], d, self.env(settings)
                    )
                    so, se = (x.replace(str(d).encode(), b"<OUT>") for x in (so, se))
                    outs.append(((rc, so, se), self.files(d, b"<OUT>")))
                    if side is self.new:
                        reports.append(d)
                self.check(f"collect {stream.name} {settings}", outs[0], outs[1])
        return reports

    def render(self, dirs):
        for d in dirs:
            files = sorted(p for p in d.glob("gpushim-*.json") if p.name.count(".") == 1)
            for f in files:
                for fmt in FORMATS:
                    self.both(f"report {f.name} --format {fmt}", ["report", str(f), "--format", fmt, "-o", "{out}"], d)
                for opts in (["--top", "1", "--depth", "3"], ["--all-frames"], ["--top", "50", "--depth", "40"]):
                    self.both(f"report {f.name} {' '.join(opts)}", ["report", str(f), *opts], d)
            self.both(f"report {d.name}/ (job view)", ["report", str(d)], d)
            for a, b in itertools.pairwise(files):
                for fmt in ("text", "json", "html"):
                    self.both(f"diff {a.name} {b.name} --format {fmt}", ["diff", str(a), str(b), "--format", fmt], d)

    def both(self, what, args, cwd):
        outs = []
        for side in (self.base, self.new):
            out = self.work / f"render-{side.name}.out"
            out.unlink(missing_ok=True)
            rc, so, se = self.run([str(side.bin), *[a.replace("{out}", str(out)) for a in args]], cwd, self.env())
            written = out.read_bytes() if out.exists() else b""
            outs.append((rc, so, se.replace(str(out).encode(), b"<OUT>"), written))
        self.check(what, outs[0], outs[1])

    # ------------------------------------------------------------------ runs, normalised

    def runs(self):
        jobs = [p for p in PROGRAMS if p[0] not in RUN_TO_RUN]
        jobs.append(("leak-py", None, ["python3", "{src}/examples/leak.py", "20"]))
        for (name, prog, args), (n, settings) in itertools.product(jobs, enumerate(RUN_SETTINGS)):
            outs = []
            for side in (self.base, self.new):
                d = self.work / "run" / side.name / f"{name}-{n}"
                shutil.rmtree(d, ignore_errors=True)
                d.mkdir(parents=True)
                cmd = [a.replace("{src}", str(side.src)) for a in args]
                cmd = cmd if prog is None else [str(side.standins / prog), *cmd]
                env = self.env({"GPUSHIM_EXAMPLE_CUDART": str(side.standins / "libcudart.so.13"), **settings}, side)
                rc, so, se = self.run([str(side.bin), "run", "--", *cmd], d, env)
                outs.append(normalised((rc, so, se), self.files(d, b"<OUT>"), d, side))
            self.check(f"run {name} {settings}", outs[0], outs[1])

    def snapshots(self):
        for n in range(3):
            outs = []
            for side in (self.base, self.new):
                d = self.work / "snapshot" / side.name / str(n)
                shutil.rmtree(d, ignore_errors=True)
                d.mkdir(parents=True)
                env = self.env({"LD_PRELOAD": str(side.lib)}, side)
                p = subprocess.Popen(
                    [str(side.standins / "target_dynamic"), "pause", str(n + 1)],
                    cwd=d,
                    env=env,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                )
                assert p.stdout.readline() == b"ready\n"
                got = [self.run([str(side.bin), "snapshot", str(p.pid)], d, self.env())]
                if n == 2:
                    got.append(self.run([str(side.bin), "snapshot", str(p.pid)], d, self.env()))
                _, se = p.communicate(b"", timeout=60)
                got.append((p.returncode, b"", se))
                outs.append(normalised(got, self.files(d, b"<OUT>"), d, side, p.pid))
            self.check(f"snapshot of pause {n + 1}", outs[0], outs[1])

    def summary(self):
        for what, a, b in self.differ[:5]:
            print(f"DIFFERS: {what}")
            sa, sb = (json.dumps(x, indent=1, default=repr, sort_keys=True).splitlines() for x in (a, b))
            for line in list(difflib.unified_diff(sa, sb, "base", "new", lineterm=""))[:60]:
                print("  " + line)
        for what, _, _ in self.differ[5:]:
            print(f"DIFFERS: {what}")
        state = "all identical" if not self.differ else f"{len(self.differ)} differ"
        print(f"compare_outputs: {self.count} invocations compared, {state}")
        return 1 if self.differ else 0


# Keys of the reports whose values differ from run to run. The reachability scan is conservative:
# whether a stale copy of a pointer is left on a stack or in a heap block depends on the frames
# that ran before (the program's and the shim's), so its classes are compared in the replays
# (one recorded scan), not between runs.
VOLATILE = re.compile(
    r"(^|_)(pid|ppid|tid|ns|s|ms|address|addr|series|timeline|ts|rate|rates|cwd|path|stamp|scanned_bytes|reach|"
    r"reachability|lost_bytes|lost_count|reachable_bytes|reachable_count)$"
)
# Lists whose order follows addresses, which differ from run to run.
BY_ADDRESS = {"allocations"}
TEXT_RULES = [
    (re.compile(rb"0x[0-9a-f]+"), b"0xADDR"),
    (re.compile(rb"[\d.]+ ?(B|KiB|MiB|GiB) read"), b"SIZE read"),
    (re.compile(rb"slowest_pair_us \d+"), b"slowest_pair_us N"),
    (re.compile(rb"gpushim: (pid \d+: )?definitely lost: [^\n]*\n"), b""),
    (re.compile(rb"gpushim: reachability[^\n]*\n"), b""),
    (re.compile(rb"(\d+ of \d+ allocations? definitely lost \(no pointer left\); )"), b""),
    (re.compile(rb"\d+(\.\d+)?\s?(ns|\xc2\xb5s|us|ms|s|min|h)\b"), b"TIME"),
    (re.compile(rb"\d+(\.\d+)? ?(B|KiB|MiB|GiB)/s"), b"RATE"),
    (re.compile(rb"\b\d{3,}\b"), b"N"),
]


def normalised(got, files, d, side, pid=None):
    """`got` and `files` with what differs between runs replaced: the run's directory, the
    build's stand-ins, pids, times, addresses; JSON files with their volatile keys dropped."""

    def text(b):
        b = b.replace(str(d).encode(), b"<OUT>").replace(str(side.standins).encode(), b"<STANDINS>")
        b = b.replace(str(side.bin.parent).encode(), b"<BIN>").replace(str(side.src).encode(), b"<SRC>")
        for rule, to in TEXT_RULES:
            b = rule.sub(to, b)
        return b

    def strip(v):
        if isinstance(v, dict):
            return {
                k: sorted(strip(x), key=json.dumps) if k in BY_ADDRESS else strip(x)
                for k, x in v.items()
                if not VOLATILE.search(k)
            }
        if isinstance(v, list):
            return [strip(x) for x in v]
        if isinstance(v, str):
            return text(v.encode()).decode(errors="replace")
        if isinstance(v, float):
            return "FLOAT"
        return v

    def name(n):
        return re.sub(r"\d+", "N", n)

    out_files = {}
    for n, b in files.items():
        if n.endswith(".json"):
            try:
                out_files[name(n)] = strip(json.loads(b))
                continue
            except ValueError:
                pass
        out_files[name(n)] = len(b) > 0 if n.endswith((".html", ".pickle")) else text(b)
    if isinstance(got, tuple):
        got = [got]
    return [(rc, text(so), text(se)) for rc, so, se in got], sorted(out_files.items())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base-target", required=True, type=Path, help="the baseline's cargo target directory")
    ap.add_argument("--base-src", required=True, type=Path, help="the baseline's source tree")
    ap.add_argument("--new-target", required=True, type=Path, help="this tree's cargo target directory")
    ap.add_argument("--work", type=Path, help="scratch directory (default: a new temporary one)")
    a = ap.parse_args()
    work = (a.work or Path(tempfile.mkdtemp(prefix="gpushim-compare-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    new_src = Path(__file__).resolve().parent.parent
    base = Side("base", a.base_target.resolve(), a.base_src.resolve())
    c = Compare(work, (base, Side("new", a.new_target.resolve(), new_src)))
    streams = c.record(c.new)
    dirs = c.replay(streams)
    c.render(dirs)
    c.runs()
    c.snapshots()
    print(f"compare_outputs: {len(streams)} streams recorded; scratch files in {work}")
    return c.summary()


if __name__ == "__main__":
    sys.exit(main())
