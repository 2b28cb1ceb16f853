"""Times a program's exit (scripts/bench-exit.sh): runs `PROGRAM N` RUNS times, reads the
CLOCK_MONOTONIC stamp it prints as its last act, and takes the same clock when waitpid returns;
prints the median, minimum and maximum of the difference (ms), and of the time until the
collector's report appeared (the collector finishes it on its own after the exit).

Usage: exit_time.py LABEL RUNS PROGRAM N [VAR=VALUE ...]   (VARs are added to the environment)
"""

import glob
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def one(program: str, n: str, env: dict) -> tuple[float, float | None]:
    out = tempfile.mkdtemp(prefix="gpushim-exit.")
    try:
        env = dict(env, GPUSHIM_OUTPUT=out)
        p = subprocess.Popen([program, n], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert p.stdout is not None
        line = p.stdout.readline()
        p.wait()
        ended = time.monotonic_ns()
        if p.returncode != 0 or not line.strip():
            sys.exit(f"exit_time: {program} {n} failed (status {p.returncode})")
        stamp = int(line)
        exit_ms = (ended - stamp) / 1e6
        report_ms = None
        if "LD_PRELOAD" in env:
            want = os.path.join(out, f"gpushim-*{p.pid}.json")
            deadline = time.monotonic() + 600
            while not glob.glob(want) and time.monotonic() < deadline:
                time.sleep(0.005)
            if glob.glob(want):
                report_ms = (time.monotonic_ns() - stamp) / 1e6
        return exit_ms, report_ms
    finally:
        shutil.rmtree(out, ignore_errors=True)


def main() -> None:
    label, runs, program, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    env = dict(os.environ)
    for kv in sys.argv[5:]:
        k, _, v = kv.partition("=")
        env[k] = v
    exits, reports = [], []
    for _ in range(runs):
        e, r = one(program, n, env)
        exits.append(e)
        if r is not None:
            reports.append(r)
    line = (
        f"{label:<34} N={int(n):>10,}  exit median {statistics.median(exits):8.1f} ms"
        f"  (min {min(exits):.1f}, max {max(exits):.1f}, {runs} runs)"
    )
    if reports:
        line += f"  report after {statistics.median(reports):.0f} ms"
    print(line, flush=True)


if __name__ == "__main__":
    main()
