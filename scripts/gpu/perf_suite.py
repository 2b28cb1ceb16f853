"""The performance suite of real workloads, on a GPU machine: each workload without the shim
and under it, interleaved, with the ratio under the shim against bare.

Rows:
- train-default, train-expandable, train-async: scripts/gpu/bench_train.py (a 4-layer transformer
  encoder with AdamW) with PyTorch's default caching allocator, `expandable_segments:True` and
  `backend:cudaMallocAsync`: steps/s, the median of the per-repetition ratios;
- pool-pair: the pool-hit pair in one process (scripts/bench-gpu-ab.sh, scripts/bench/paired.c),
  with the floor rows beside it (ns added per pair);
- gpt2: `GPT2LMHeadModel(GPT2Config())`, 5 training steps and `generate` (work_gpt2.py): wall time,
  and the exit (from the program's last act to waitpid's return, shim median minus bare median);
- lightning: a Lightning `fit` (work_lightning.py): wall time, the exit;
- heap4g: a program with a 4 GiB host heap (work_heap.py): the exit;
- forks: 20 forked children one after another, each making one cudaMalloc (scripts/bench/forks.c):
  milliseconds a child.
For every shim run of gpt2, lightning and heap4g the report's reachability scan is read: its
status, elapsed time and bytes read.

Needs target/release/libgpushim.so and target/release/gpushim. Writes a log and the table
(perf-suite.md) under $OUT (default /tmp/gpushim-perf).

Usage: python3 scripts/gpu/perf_suite.py [--quick] [--reps N] [--only ROW,ROW]
  --quick: train-default, train-async and pool-pair only, 2 repetitions (about 3 minutes).
"""

import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REL = os.path.join(ROOT, "target", "release")
GPU = os.path.join(ROOT, "scripts", "gpu")
OUT = os.environ.get("OUT") or "/tmp/gpushim-perf"
SAFE = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
TRAIN = {
    "train-default": {},
    "train-expandable": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
    "train-async": {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"},
}
LOG = None


def log(*a):
    line = " ".join(str(x) for x in a)
    print(line, flush=True)
    if LOG:
        LOG.write(line + "\n")
        LOG.flush()


def run(argv, env_extra, shim, timeout=600):
    """Runs argv (with the shim or not); returns (stdout, stderr, seconds, ended_ns, report)."""
    out = tempfile.mkdtemp(prefix="gpushim-perf.")
    env = dict(os.environ, **SAFE, **env_extra, PYTHONUNBUFFERED="1", GPUSHIM_OUTPUT=out)
    if shim:
        env["LD_PRELOAD"] = os.path.join(REL, "libgpushim.so")
        env["GPUSHIM_COLLECTOR"] = os.path.join(REL, "gpushim")
    t0 = time.monotonic()
    try:
        p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
        ended = time.monotonic_ns()
        secs = time.monotonic() - t0
        report = None
        if shim:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                files = [
                    f
                    for f in glob.glob(os.path.join(out, "gpushim-*.json"))
                    if os.path.basename(f).count(".") == 1 and "-snapshot-" not in f
                ]
                if files:
                    try:
                        with open(files[0]) as f:
                            report = json.load(f)
                        holders = files[0][: -len(".json")] + ".holders.json"
                        if os.path.exists(holders):
                            with open(holders) as f:
                                report["_walk"] = json.load(f).get("walk")
                        break
                    except (OSError, ValueError):
                        pass
                time.sleep(0.05)
        if p.returncode != 0:
            log(f"  FAILED ({p.returncode}): {' '.join(argv)}\n{p.stderr[-3000:]}")
        return p.stdout, p.stderr, secs, ended, report
    finally:
        shutil.rmtree(out, ignore_errors=True)


def last_act(stdout):
    for line in reversed(stdout.strip().splitlines()):
        if line.strip().isdigit():
            return int(line)
    return None


def scan_of(report):
    r = (report or {}).get("reachability")
    if not r:
        return "no scan"
    text = f"{r.get('status')} in {r.get('elapsed_ms', 0):.0f} ms, {r.get('scanned_bytes', 0) / (1 << 30):.2f} GiB read"
    w = (report or {}).get("_walk")
    if w:
        text += f"; exit walk {w.get('elapsed_s', 0):.2f} s, {w.get('objects_visited', 0):,} objects"
    return text


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else float("nan")


def train_rows(names, reps, steps):
    rows = []
    res = {n: {"none": [], "shim": []} for n in names}
    for rep in range(reps):
        for n in names:
            for cfg in ("none", "shim"):
                so, _se, _, _, _ = run(
                    ["python3", os.path.join(GPU, "bench_train.py"), str(steps)], TRAIN[n], cfg == "shim"
                )
                try:
                    v = float(so.strip().splitlines()[-1])
                except (IndexError, ValueError):
                    v = None
                res[n][cfg].append(v)
                log(f"  {n} rep {rep + 1} {cfg}: {v} steps/s")
    for n in names:
        ratios = [s / b for s, b in zip(res[n]["shim"], res[n]["none"], strict=False) if s and b]
        rows.append(
            (
                n,
                f"{med(res[n]['none']):.2f} steps/s",
                f"{med(res[n]['shim']):.2f} steps/s",
                f"**{med(ratios):.3f}**",
                "",
            )
        )
    return rows


def exit_rows(name, argv, reps, env_extra=None):
    walls, exits, scans = {"none": [], "shim": []}, {"none": [], "shim": []}, []
    for rep in range(reps):
        for cfg in ("none", "shim"):
            so, se, secs, ended, report = run(argv, env_extra or {}, cfg == "shim")
            stamp = last_act(so)
            ex = (ended - stamp) / 1e9 if stamp else None
            walls[cfg].append(secs)
            exits[cfg].append(ex)
            if cfg == "shim":
                scans.append(scan_of(report))
                tail = [ln for ln in se.splitlines() if ln.startswith("gpushim:")][-8:]
                log("    " + "\n    ".join(tail))
            log(f"  {name} rep {rep + 1} {cfg}: wall {secs:.2f} s, exit {ex if ex is None else round(ex, 3)} s")
    wr = med(walls["shim"]) / med(walls["none"])
    added = med(exits["shim"]) - med(exits["none"])
    note = "; ".join(sorted(set(scans)))
    return [
        (
            name,
            f"wall {med(walls['none']):.2f} s, exit {med(exits['none']):.3f} s",
            f"wall {med(walls['shim']):.2f} s, exit {med(exits['shim']):.3f} s",
            f"wall {wr:.3f}; exit **+{added:.3f} s**",
            f"scan: {note}",
        )
    ]


def pool_rows(reps):
    env = dict(os.environ, OUT=os.path.join(OUT, "ab"), PAIRED="1")
    p = subprocess.run(
        ["bash", os.path.join(ROOT, "scripts", "bench-gpu-ab.sh"), str(reps), f"shim={REL}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    log(p.stdout[-4000:], p.stderr[-2000:])
    rows = []
    in_paired = False
    for line in p.stdout.splitlines():
        if line.startswith("In one process"):
            in_paired = True
        if in_paired and line.startswith("| ") and not line.startswith("| configuration") and "---" not in line:
            cells = [c.strip() for c in line.strip("|").split("|")]
            if cells[0] in ("shim", "shim-nobt", "floor-1", "floor-2", "none"):
                label = {"shim": "pool-pair (backtraces)", "shim-nobt": "pool-pair (no backtraces)"}.get(
                    cells[0], f"pool-pair {cells[0]}"
                )
                rows.append(
                    (
                        label,
                        "",
                        "",
                        f"**+{cells[1]} ns**" if cells[0].startswith("shim") else f"+{cells[1]} ns",
                        f"ratio {cells[2]}",
                    )
                )
    return rows


def fork_rows(reps, n=20):
    """forks: N short-lived forked children one after another, each making one cudaMalloc (its
    parent none: CUDA does not survive fork), bare and under the shim (scripts/bench/forks.c):
    each child pays for a CUDA context of its own bare, and for a collector of its own under the
    shim."""
    exe = os.path.join(tempfile.mkdtemp(prefix="gpushim-forks."), "forks")
    cuda = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    src = os.path.join(ROOT, "scripts", "bench", "forks.c")
    lib = f"{cuda}/lib64"
    subprocess.run(["gcc", "-O2", "-o", exe, src, f"-L{lib}", "-lcudart", f"-Wl,-rpath,{lib}"], check=True)
    per = {"none": [], "shim": []}
    for rep in range(reps):
        for cfg in ("none", "shim"):
            so, _se, secs, _, _ = run([exe, str(n), "alloc", "children-only"], {}, cfg == "shim")
            ms = None
            for line in so.splitlines():
                if "ms each" in line:
                    ms = float(line.split(",")[1].split()[0])
            per[cfg].append(ms)
            log(f"  forks rep {rep + 1} {cfg}: {so.strip()} (wall {secs:.2f} s)")
    bare, shim = med(per["none"]), med(per["shim"])
    return [
        (
            f"forks ({n} children)",
            f"{bare:.1f} ms a child",
            f"{shim:.1f} ms a child",
            f"{shim / bare:.3f}; **+{shim - bare:.1f} ms a child**",
            "each child's first cudaMalloc makes its CUDA context; under the shim also its collector",
        )
    ]


def main():
    global LOG
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--only", default="")
    ap.add_argument("--exit-reps", type=int, default=5, help="runs of gpt2 (lightning and heap4g: at most 2)")
    ap.add_argument("--budget", type=float, default=540, help="seconds after which the rows not started are left out")
    a = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    LOG = open(os.path.join(OUT, "perf-suite.log"), "w")  # noqa: SIM115 (open for the whole run)
    reps = a.reps or (2 if a.quick else 3)
    only = set(filter(None, a.only.split(",")))
    want = (
        ["train-default", "train-async", "pool-pair"]
        if a.quick
        else [*TRAIN, "pool-pair", "gpt2", "lightning", "heap4g", "forks"]
    )
    if only:
        want = [w for w in want if w in only] or sorted(only)
    t0 = time.monotonic()
    rows = []
    left_out = []

    def step(name, make):
        if time.monotonic() - t0 > a.budget:
            left_out.append(name)
            return
        rows.extend(make())

    trains = [w for w in want if w in TRAIN]
    if trains:
        step("training", lambda: train_rows(trains, reps, 100))
    if "pool-pair" in want:
        step("pool-pair", lambda: pool_rows(reps))
    if "gpt2" in want:
        step("gpt2", lambda: exit_rows("gpt2", ["python3", os.path.join(GPU, "work_gpt2.py"), "5"], a.exit_reps))
    if "lightning" in want:
        step(
            "lightning",
            lambda: exit_rows(
                "lightning", ["python3", os.path.join(GPU, "work_lightning.py"), "1"], min(2, a.exit_reps)
            ),
        )
    if "heap4g" in want:
        step(
            "heap4g",
            lambda: exit_rows("heap4g", ["python3", os.path.join(GPU, "work_heap.py"), "4"], min(2, a.exit_reps)),
        )
    if "forks" in want:
        step("forks", lambda: fork_rows(min(reps, 2)))
    for name in left_out:
        rows.append((name, "", "", "not run", f"past the suite's budget of {a.budget:.0f} s"))
    if os.environ.get("GPUSHIM_SUITE_MAPS") == "1":
        for w in ("work_gpt2.py", "work_lightning.py"):
            _so, se, _, _, _ = run(["python3", os.path.join(GPU, w)], {"GPUSHIM_SUITE_MAPS": "1"}, True)
            log(f"maps at the end of {w}:\n" + "\n".join(ln for ln in se.splitlines() if not ln.startswith("gpushim")))
    smi = subprocess.run(
        ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"], capture_output=True, text=True
    ).stdout.strip()
    torch_v = subprocess.run(
        ["python3", "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True
    ).stdout.strip()
    head = [
        f"date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {smi}; torch {torch_v}; "
        f"python {sys.version.split()[0]}; "
        f"{os.cpu_count()} CPUs; {reps} interleaved repetitions; {time.monotonic() - t0:.0f} s",
        f"command: python3 scripts/gpu/perf_suite.py {' '.join(sys.argv[1:])}",
        "",
        "| row | bare | shim | shim against bare | notes |",
        "|---|---|---|---|---|",
    ]
    table = "\n".join(head + [f"| {' | '.join(r)} |" for r in rows])
    with open(os.path.join(OUT, "perf-suite.md"), "w") as f:
        f.write(table + "\n")
    log(table)


if __name__ == "__main__":
    main()
