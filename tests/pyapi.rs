//! The Python API (`python/gpushim`): `gpushim.snapshot(label)`, `is_tracing()`,
//! `report_path()` in a CPython program that allocates through the runtime stand-in with
//! ctypes, under the shim and without it; and the pytest plugin and the Jupyter magic in real
//! pytest and ipykernel processes (those need the test virtual environment that
//! scripts/test.sh makes, `target/py-tools`, or `GPUSHIM_TEST_VENV`).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::python::python3;
use crate::util::*;

/// The repository's Python package directory (`python/`), for `PYTHONPATH`.
pub(crate) fn package_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("python")
}

/// The API scenario: 1 MiB, a labelled snapshot from the main thread, one into another
/// directory, 2 MiB more, an unlabelled snapshot from another thread; each result printed on
/// its own line.
const SCRIPT: &str = r#"import ctypes
import sys
import threading

import gpushim

cudart = ctypes.CDLL(sys.argv[1])
keep = []


def alloc(n):
    p = ctypes.c_void_p()
    rc = cudart.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(n))  # @malloc
    if rc != 0:
        raise SystemExit(f"cudaMalloc returned {rc}")
    keep.append(p.value)


print("tracing", gpushim.is_tracing(), flush=True)
print("report", gpushim.report_path(), flush=True)
alloc(1 << 20)
first = gpushim.snapshot("after one/MiB", timeout=20)
print("first", first, flush=True)
print("aside", gpushim.snapshot("aside", timeout=20, directory=sys.argv[2]), flush=True)
alloc(2 << 20)
got = []
t = threading.Thread(target=lambda: got.append(gpushim.snapshot(timeout=20)))
t.start()
t.join()
print("second", got[0], flush=True)
# The first snapshot's heap walk runs on this (the main) thread once snapshot() returned.
print("holders", gpushim.holders_path(first, timeout=20), flush=True)
"#;

/// The value printed after `key ` on its own line of `stdout`.
fn printed<'a>(stdout: &'a str, key: &str, run: &Outcome) -> &'a str {
    let prefix = format!("{key} ");
    stdout.lines().find_map(|l| l.strip_prefix(&prefix)).unwrap_or_else(|| panic!("no line `{key} …`{run}"))
}

/// Writes the scenario into the target's directory and runs it with the package importable.
fn run_api(t: Target) -> Outcome {
    let script = t.dir.path().join("api.py");
    std::fs::write(&script, SCRIPT).unwrap();
    let cudart = standin("libcudart.so.13");
    let aside = t.dir.path().join("aside");
    std::fs::create_dir(&aside).unwrap();
    t.args(&[script.to_str().unwrap(), cudart.to_str().unwrap(), aside.to_str().unwrap()])
        .env("PYTHONPATH", package_dir().display())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .run()
}

/// From the main thread and from another thread, `snapshot()` returns the path of a file that
/// holds exactly the memory live at the call (1 MiB, then 3 MiB), with the label in the report
/// and (sanitized) in the file name; the heap walk of the main-thread snapshot completes after
/// the call returned (no deadlock); `report_path()` names the final report.
#[test]
fn snapshot_from_python_writes_a_labelled_file() {
    let run = run_api(Target::new(python3(), "pyapi_snapshot"));
    run.success();
    let dir = run.dir.path();
    assert_eq!(printed(&run.stdout, "tracing", &run), "True", "{run}");
    let pid = run.report()["pid"].as_u64().unwrap();
    assert_eq!(printed(&run.stdout, "report", &run), dir.join(format!("gpushim-{pid}.json")).to_str().unwrap());

    let first = PathBuf::from(printed(&run.stdout, "first", &run));
    assert_eq!(first, dir.join(format!("gpushim-{pid}-snapshot-1-after_one_MiB.json")), "{run}");
    let r1: Value = read_json(&first, &run);
    assert_eq!((r1["reason"].as_str(), r1["snapshot"].as_u64()), (Some("snapshot"), Some(1)), "{run}");
    assert_eq!(r1["label"], "after_one_MiB", "{run}");
    assert_eq!((total(&r1, "live_bytes"), total(&r1, "live_count")), (1 << 20, 1), "{run}");

    // Numbered within its own directory: the output directory's numbers have no gap for it.
    let aside = PathBuf::from(printed(&run.stdout, "aside", &run));
    assert_eq!(aside, dir.join("aside").join(format!("gpushim-{pid}-snapshot-1-aside.json")), "{run}");
    assert_eq!(read_json(&aside, &run)["snapshot"].as_u64(), Some(1), "{run}");
    let second = PathBuf::from(printed(&run.stdout, "second", &run));
    assert_eq!(second, dir.join(format!("gpushim-{pid}-snapshot-2.json")), "{run}");
    assert_eq!(read_json(&second, &run)["snapshot"].as_u64(), Some(2), "{run}");
    let r2: Value = read_json(&second, &run);
    assert!(r2.get("label").is_none(), "no label, no field{run}");
    assert_eq!((total(&r2, "live_bytes"), total(&r2, "live_count")), (3 << 20, 2), "{run}");

    let holders = printed(&run.stdout, "holders", &run);
    assert_eq!(holders, dir.join(format!("gpushim-{pid}-snapshot-1-after_one_MiB.holders.json")).to_str().unwrap());
    // Each snapshot's reachability scan is written beside it, as a signal's is.
    for stem in ["snapshot-1-after_one_MiB", "snapshot-2"] {
        let reach = dir.join(format!("gpushim-{pid}-{stem}.reach.json"));
        let reach = read_json(&reach, &run);
        assert_eq!(reach["reachability"]["status"], "complete", "{reach}{run}");
    }
    let aside_reach = dir.join("aside").join(format!("gpushim-{pid}-snapshot-1-aside.reach.json"));
    assert!(aside_reach.is_file(), "{run}");
}

/// A rank's program (`RANK=0 WORLD_SIZE=2`, as torchrun sets them): `report_path()`, asked
/// before the first CUDA allocation and after it, names the final report the collector wrote,
/// `gpushim-rank00000-<pid>.json`.
#[test]
fn report_path_of_a_rank_names_the_rank_s_report() {
    let script = r#"import ctypes
import sys

import gpushim

print("before", gpushim.report_path(), flush=True)
cudart = ctypes.CDLL(sys.argv[1])
p = ctypes.c_void_p()
if cudart.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(1 << 20)) != 0:
    raise SystemExit("cudaMalloc failed")
print("after", gpushim.report_path(), flush=True)
"#;
    let t = Target::new(python3(), "pyapi_rank_path");
    let path = t.dir.path().join("rank.py");
    std::fs::write(&path, script).unwrap();
    let cudart = standin("libcudart.so.13");
    let run = t
        .args(&[path.to_str().unwrap(), cudart.to_str().unwrap()])
        .env("PYTHONPATH", package_dir().display())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("RANK", 0)
        .env("WORLD_SIZE", 2)
        .run();
    run.success();
    let pid = run.report()["pid"].as_u64().unwrap();
    let written: Vec<String> = run.files().into_iter().filter(|f| f.ends_with(&format!("-{pid}.json"))).collect();
    assert_eq!(written, [format!("gpushim-rank00000-{pid}.json")], "{run}");
    let expected = run.dir.path().join(&written[0]);
    for when in ["before", "after"] {
        assert_eq!(printed(&run.stdout, when, &run), expected.to_str().unwrap(), "{when}{run}");
    }
}

/// Without the shim: nothing raises, `is_tracing()` is False, `snapshot()` and `report_path()`
/// are None, and one line on stderr says that tracing is off.
#[test]
fn without_the_shim_the_api_says_tracing_is_off() {
    let run = run_api(Target::new(python3(), "pyapi_off").preload(None));
    run.success();
    assert_eq!(printed(&run.stdout, "tracing", &run), "False", "{run}");
    assert_eq!(printed(&run.stdout, "report", &run), "None", "{run}");
    assert_eq!(printed(&run.stdout, "first", &run), "None", "{run}");
    assert_eq!(printed(&run.stdout, "second", &run), "None", "{run}");
    let off: Vec<&str> = run.stderr.lines().filter(|l| l.contains("tracing is off")).collect();
    assert_eq!(off.len(), 1, "said once{run}");
    assert_eq!(printed(&run.stdout, "aside", &run), "None", "{run}");
    assert_eq!(names_in(run.dir.path()), ["api.py", "aside"], "no report without the shim{run}");
    assert!(names_in(&run.dir.path().join("aside")).is_empty(), "{run}");
}

/// The Python of the test virtual environment (pytest, ipykernel, jupyter_client):
/// `GPUSHIM_TEST_VENV`, else `target/py-tools` (made by scripts/test.sh).
pub(crate) fn venv_python() -> PathBuf {
    let venv = std::env::var_os("GPUSHIM_TEST_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| bin_dir().parent().expect("target/<profile>").join("py-tools"));
    let py = venv.join("bin/python");
    assert!(
        py.exists(),
        "{} is missing: run scripts/test.sh once (it makes the test virtual environment with pytest, \
         ipykernel and jupyter_client), or set GPUSHIM_TEST_VENV",
        py.display()
    );
    py
}

/// `sys.executable`-style check that `python` can import `modules`.
pub(crate) fn assert_imports(python: &Path, modules: &str) {
    let ok = Command::new(python).args(["-c", &format!("import {modules}")]).status().map(|s| s.success());
    assert_eq!(ok.ok(), Some(true), "{} cannot import {modules}: re-run scripts/test.sh", python.display());
}

/// The pytest test file: one test leaks 32 MiB under a 16 MiB limit, one frees what it
/// allocated, one leaks 1 MiB with no limit.
const PYTEST_FILE: &str = r#"import ctypes
import os

import pytest

cudart = ctypes.CDLL(os.environ["CUDART"])
kept = []


def malloc(n):
    p = ctypes.c_void_p()
    assert cudart.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(n)) == 0
    return p


@pytest.mark.gpushim_limit_leaks("16 MiB")
def test_leaks():
    kept.append(malloc(32 << 20))  # @leak


@pytest.mark.gpushim_limit_leaks("16 MiB")
def test_clean():
    p = malloc(64 << 20)
    assert cudart.cudaFree(p) == 0


def test_small_leak():
    kept.append(malloc(1 << 20))  # @small
"#;

/// The 1-based line of `marker` in `text`.
fn line_in(text: &str, marker: &str) -> usize {
    text.lines().position(|l| l.contains(marker)).unwrap_or_else(|| panic!("no {marker}")) + 1
}

/// A real pytest run with the plugin under the shim on the stand-ins: the test over its
/// limit fails naming its bytes and line, the clean one passes, and the summary table has
/// the two leaking tests with their exact bytes.
#[test]
fn pytest_plugin_fails_the_test_over_its_limit() {
    let py = venv_python();
    assert_imports(&py, "pytest");
    let t = Target::new(&py, "pyapi_pytest");
    let file = t.dir.path().join("test_leaks.py");
    std::fs::write(&file, PYTEST_FILE).unwrap();
    let tmp = t.dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let run = t
        .args(&["-m", "pytest", "-p", "gpushim.pytest_plugin", "--gpushim", "-p", "no:cacheprovider", "-q"])
        .args(&[file.to_str().unwrap()])
        .env("CUDART", standin("libcudart.so.13").display())
        .env("PYTHONPATH", package_dir().display())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("TMPDIR", tmp.display())
        .run();
    // The per-test snapshots went to a directory of the run's own, removed at its end: the
    // output directory holds the final report (and its companions) only.
    let names = names_in(run.dir.path());
    assert!(names.iter().all(|n| !n.contains("-snapshot-")), "{names:?}{run}");
    assert!(names_in(&tmp).is_empty(), "{:?}{run}", names_in(&tmp));
    assert_eq!(run.status.code(), Some(1), "pytest fails: one test over its limit{run}");
    assert!(run.stdout.contains("1 failed, 2 passed"), "{run}");
    assert!(run.stdout.lines().any(|l| l.starts_with("FAILED ") && l.contains("test_leaks.py::test_leaks")), "{run}");
    let leak_line = line_in(PYTEST_FILE, "# @leak");
    // The file named as the reports name it: its directory and its name.
    let short = file.iter().rev().take(2).collect::<Vec<_>>().into_iter().rev().collect::<PathBuf>();
    let msg = format!(
        "gpushim: the test left 32.0 MiB (33554432 bytes, 1 allocation) of CUDA memory live, more than its limit \
         of 16.0 MiB, most at test_leaks ({}:{leak_line})",
        short.display()
    );
    assert!(run.stdout.contains(&msg), "wanted {msg}{run}");
    let table: Vec<&str> = run.stdout.lines().skip_while(|l| !l.contains("CUDA memory left live per test")).collect();
    let rows: Vec<&&str> = table.iter().filter(|l| l.starts_with(' ') && l.contains("::test_")).collect();
    assert_eq!(rows.len(), 2, "two tests left memory live{run}");
    assert!(rows[0].contains(" 33554432 ") && rows[0].contains("test_leaks.py::test_leaks, at "), "{run}");
    // Named as the reports name a place, `function (file:line)`, with one pair of parentheses
    // (it read "((test_small_leak))" at most).
    let small =
        format!("::test_small_leak, at test_small_leak ({}:{})", short.display(), line_in(PYTEST_FILE, "# @small"));
    assert!(rows[1].contains(" 1048576 ") && rows[1].ends_with(&small) && !rows[1].contains("(("), "{run}");
    // Under the table, what it measures beside the report's suspects (the whole run's).
    assert!(
        table.iter().any(|l| l.starts_with("this table is each test's own growth")
            && l.contains("the leak suspects in gpushim's report at exit are of the whole run")),
        "{run}"
    );
}

/// `gpushim run -- python -m pytest` without `-s`: pytest has fd 2 redirected to its capture
/// file when the first allocation starts the collector, yet the exit summary reaches the
/// terminal: `run` hands its own stderr to the collector (`GPUSHIM_RUN_STDERR`).
#[test]
fn gpushim_run_of_pytest_prints_the_exit_summary_on_its_stderr() {
    let py = venv_python();
    assert_imports(&py, "pytest");
    let dir = TempDir::new("run-pytest");
    let file = dir.path().join("test_leaky.py");
    std::fs::write(
        &file,
        "import ctypes, os\n\ncudart = ctypes.CDLL(os.environ['CUDART'])\nkept = []\n\n\n\
         def test_leaky():\n    p = ctypes.c_void_p()\n    \
         assert cudart.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(3 << 20)) == 0\n    kept.append(p)\n",
    )
    .unwrap();
    let out = Command::new(collector())
        .args(["run", "--output", dir.path().to_str().unwrap(), "--"])
        .arg(&py)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:gpushim"])
        .arg(&file)
        .current_dir(dir.path())
        .env("CUDART", standin("libcudart.so.13"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env_remove("LD_PRELOAD")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(0), "{stdout}{err}");
    assert!(stdout.contains("1 passed"), "{stdout}{err}");
    assert!(
        err.lines().any(|l| l.starts_with("gpushim: pid ") && l.contains(" (exit): 1 allocation live, 3.0 MiB")),
        "{stdout}{err}"
    );
    assert!(err.lines().any(|l| l.starts_with("gpushim: report written to ")), "{stdout}{err}");
}

/// Without the shim the plugin measures nothing and says why; every test passes.
#[test]
fn pytest_plugin_without_the_shim_fails_the_run_unless_told_to_skip_the_limits() {
    let py = venv_python();
    assert_imports(&py, "pytest");
    let run = |name: &str, extra: &[&str]| {
        let t = Target::new(&py, name).preload(None);
        let file = t.dir.path().join("test_leaks.py");
        std::fs::write(&file, PYTEST_FILE).unwrap();
        t.args(&["-m", "pytest", "-p", "gpushim.pytest_plugin", "--gpushim", "-p", "no:cacheprovider", "-q", "-rs"])
            .args(extra)
            .args(&[file.to_str().unwrap()])
            .env("CUDART", standin("libcudart.so.13").display())
            .env("PYTHONPATH", package_dir().display())
            .run()
    };
    // Asked for and not traced: a usage error (pytest's 4), one line, no test run.
    let r = run("pyapi_pytest_off", &[]);
    assert_eq!(r.status.code(), Some(4), "{r}");
    assert!(r.stderr.contains("gpushim: --gpushim asked for, but this pytest is not traced"), "{r}");
    assert!(!r.stdout.contains("passed"), "{r}");
    // Told to go on: the tests with a limit are skipped, each saying why.
    let r = run("pyapi_pytest_optional", &["--gpushim-optional"]);
    assert_eq!(r.status.code(), Some(0), "{r}");
    assert!(r.stdout.contains("1 passed, 2 skipped"), "{r}");
    assert!(r.stdout.contains("tracing is off, so this test's CUDA memory limit cannot be checked"), "{r}");
    assert!(r.stdout.contains("tracing is off: run pytest under gpushim"), "{r}");
}

/// Runs cells in a Jupyter kernel found by name (argv[1]) through `JUPYTER_PATH`, and prints
/// each cell's status and output after a `=== cell N STATUS` line. The cells are `CELLS`
/// below, or a JSON list of cells in the file argv[2].
const KERNEL_DRIVER: &str = r#"import json
import sys

from jupyter_client.manager import start_new_kernel

LEAK = "p = ctypes.c_void_p()\nassert cudart.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(8 << 20)) == 0\nkept.append(Buf(p.value))"
# A buffer object the heap walk recognizes (`__cuda_array_interface__`, as CuPy's and Numba's).
BUF = """class Buf:
    def __init__(self, ptr):
        self.__cuda_array_interface__ = {"shape": (8 << 20,), "typestr": "|u1", "data": (ptr, False), "version": 3}
"""
CELLS = [
    "%load_ext gpushim",
    "import ctypes, os\ncudart = ctypes.CDLL(os.environ['CUDART'])\nkept = []\n" + BUF,
    LEAK,
    LEAK,
    "%gpushim diff",
    "%gpushim diff cell2",
    "%gpushim snapshot mine",
    "%gpushim report",
    "import gpushim\nprint('tracing', gpushim.is_tracing())",
    "def leak_one():\n    p = ctypes.c_void_p()\n    assert cudart.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(4 << 20)) == 0\n    kept.append(Buf(p.value))",
    "leak_one()\n%gpushim diff",
    "import gpushim._jupyter as gj\nprint(gj._session.cells_dir)\nprint(' '.join(sorted(os.listdir(gj._session.cells_dir))))",
]
if len(sys.argv) > 2:
    with open(sys.argv[2]) as f:
        CELLS = json.load(f)

km, kc = start_new_kernel(kernel_name=sys.argv[1], startup_timeout=120)
try:
    for i, code in enumerate(CELLS):
        out = []

        def hook(msg, out=out):
            c = msg["content"]
            if msg["msg_type"] == "stream":
                out.append(c["text"])
            elif msg["msg_type"] == "error":
                out.append(f"ERROR {c['ename']}: {c['evalue']}\n")

        reply = kc.execute_interactive(code, timeout=120, output_hook=hook)
        print(f"=== cell {i} {reply['content']['status']}")
        print("".join(out), end="")
    print("=== end")
finally:
    kc.stop_channels()
    km.shutdown_kernel(now=False)
"#;

/// `gpushim kernel install --name NAME --prefix PREFIX --python PY`, checked to succeed; what it
/// said on stdout.
fn install_kernel(name: &str, prefix: &Path, py: &Path) -> String {
    let install = Command::new(collector())
        .args(["kernel", "install", "--name", name, "--prefix"])
        .arg(prefix)
        .arg("--python")
        .arg(py)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&install.stdout).into_owned();
    assert!(install.status.success(), "{said}{}", String::from_utf8_lossy(&install.stderr));
    said
}

/// The output of cell `n` in the driver's stdout, after checking that it ran without error.
fn cell_output<'a>(stdout: &'a str, n: usize, run: &Outcome) -> &'a str {
    let head = format!("=== cell {n} ok\n");
    let start = stdout.find(&head).unwrap_or_else(|| panic!("cell {n} did not run ok{run}")) + head.len();
    let end = stdout[start..].find("=== ").map_or(stdout.len(), |e| start + e);
    &stdout[start..end]
}

/// `gpushim kernel install` writes a kernel spec that preloads the shim; a real ipykernel
/// started from it by jupyter_client runs a cell that leaks 8 MiB twice; `%gpushim diff` shows
/// what the last cell left alive (8 MiB, one new site at the cell's line 2, `In [4] line 2`,
/// and the holder that grew: the list `kept`), `%gpushim diff cell2` what was left since
/// (16 MiB), `%gpushim snapshot LABEL` and `%gpushim report` work, and the files they write name
/// the cells as the notebook does.
#[test]
fn jupyter_kernel_diff_names_the_leaking_cell_line() {
    let py = venv_python();
    assert_imports(&py, "ipykernel, jupyter_client");
    let t = Target::new(&py, "pyapi_jupyter").preload(None);
    let dir = t.dir.path().to_path_buf();
    let prefix = dir.join("prefix");
    let said = install_kernel("gpushim-test", &prefix, &py);
    let spec_dir = prefix.join("share/jupyter/kernels/gpushim-test");
    assert_eq!(said.trim(), format!("Installed kernel spec gpushim-test in {}", spec_dir.display()));
    let spec: Value = serde_json::from_slice(&std::fs::read(spec_dir.join("kernel.json")).unwrap()).unwrap();
    assert_eq!(spec["env"]["LD_PRELOAD"], shim().to_str().unwrap(), "{spec:#}");
    assert_eq!(spec["argv"][0], py.to_str().unwrap(), "{spec:#}");
    // The test environment's Python has no gpushim package: the checkout's goes on the kernel's
    // PYTHONPATH, so that %load_ext gpushim works from a cargo build.
    assert_eq!(
        std::fs::canonicalize(spec["env"]["PYTHONPATH"].as_str().unwrap_or_default()).ok(),
        std::fs::canonicalize(package_dir()).ok(),
        "{spec:#}"
    );

    let driver = dir.join("driver.py");
    std::fs::write(&driver, KERNEL_DRIVER).unwrap();
    // The per-cell snapshots' directory goes to TMPDIR; one left by a killed kernel (its lock
    // file held by no process) is removed at `%load_ext`; one whose lock is held (a kernel that
    // runs, here this test) and one without a lock file (kept) are not.
    let tmp = dir.join("tmp");
    let stale = tmp.join("gpushim-kernel-999999999-abc");
    let running = tmp.join("gpushim-kernel-12-abc");
    let kept = tmp.join("gpushim-kernel-13-abc");
    for d in [&stale, &running, &kept] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(stale.join(".lock"), b"").unwrap();
    let held = std::fs::File::create(running.join(".lock")).unwrap();
    // SAFETY: flock on a file this test opened and keeps open until the end.
    assert_eq!(unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&held), libc::LOCK_EX) }, 0);
    let run = t
        .args(&[driver.to_str().unwrap(), "gpushim-test"])
        .env("JUPYTER_PATH", prefix.join("share/jupyter").display())
        .env("JUPYTER_RUNTIME_DIR", dir.join("runtime").display())
        .env("IPYTHONDIR", dir.join("ipython").display())
        .env("CUDART", standin("libcudart.so.13").display())
        .env("PYTHONPATH", package_dir().display())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("TMPDIR", tmp.display())
        .run();
    run.success();
    assert!(run.stdout.contains("=== end"), "{run}");

    // The per-cell snapshots were in the kernel's own directory, removed when it ended; the
    // working directory holds only what was asked for (`%gpushim snapshot mine`, `%gpushim
    // report`) and the final report.
    let listing = cell_output(&run.stdout, 11, &run);
    let mut lines = listing.lines();
    let cells_dir = PathBuf::from(lines.next().unwrap_or_default());
    let in_cells = lines.next().unwrap_or_default();
    assert!(
        cells_dir.parent() == Some(tmp.as_path())
            && cells_dir.file_name().unwrap().to_str().unwrap().starts_with("gpushim-kernel-"),
        "{listing}{run}"
    );
    for want in ["-snapshot-1-load.json", "-cell3.json", "-cell3.holders.json", "-cell10.json"] {
        assert!(in_cells.split(' ').any(|f| f.ends_with(want)), "{want} in {in_cells}{run}");
    }
    assert!(!cells_dir.exists(), "{} is left after the kernel ended{run}", cells_dir.display());
    assert!(!stale.exists() && running.is_dir() && kept.is_dir(), "{run}");
    drop(held);
    let ours: Vec<String> = names_in(&dir).into_iter().filter(|n| n.starts_with("gpushim-")).collect();
    assert!(
        ours.iter().all(|n| !n.contains("-cell") && !n.contains("-load")) && ours.iter().any(|n| n.contains("-mine")),
        "{ours:?}{run}"
    );
    // The snapshots asked for are numbered 1, 2, … in the working directory: the per-cell
    // ones, numbered in their own directory, leave no gaps.
    let mut numbers: Vec<u32> = ours
        .iter()
        .filter(|n| n.ends_with(".json") && !n.ends_with(".holders.json") && !n.ends_with(".reach.json"))
        .filter_map(|n| n.split("-snapshot-").nth(1)?.split(['-', '.']).next()?.parse().ok())
        .collect();
    numbers.sort_unstable();
    assert_eq!(numbers, (1..=numbers.len() as u32).collect::<Vec<_>>(), "{ours:?}{run}");
    assert!(numbers.len() >= 2, "{ours:?}{run}");

    // What the last cell (the second run of LEAK) left alive: one new site at its line 2.
    let diff = cell_output(&run.stdout, 4, &run);
    assert!(diff.contains("sites: 1 new (+8.0 MiB), 0 vanished (0 B), 0 grown, 0 shrunk, 1 unchanged"), "{diff}{run}");
    assert!(diff.contains("live         8.0 MiB -> 16.0 MiB (+8.0 MiB) in 1 -> 2 allocations"), "{diff}{run}");
    let growth: Vec<&str> = diff.lines().filter(|l| l.trim_start().starts_with("+8.0 MiB  live")).collect();
    assert_eq!(growth.len(), 1, "{diff}{run}");
    // The site is the cell's line 2, named in the diff's text as in its notebook lines below.
    let cell_frame = growth[0].split(": ").nth(1).unwrap_or_default();
    assert!(cell_frame.starts_with("<module> (In [4] line 2)"), "{}{run}", growth[0]);
    assert!(!diff.contains("(ipykernel_"), "{diff}{run}");
    // Who holds it: the heap walk's files exist, so the diff lists the holder that grew.
    assert!(
        diff.contains("holders that grew (who holds the memory, from the heap walks):\n")
            && diff.contains("+8.0 MiB  8.0 MiB -> 16.0 MiB in 1 -> 2 objects: __main__ global 'kept' → list[*]\n"),
        "{diff}{run}"
    );
    // The notebook's own numbering: the leaking cell is In [4] (the second run), line 2.
    assert!(diff.ends_with("left alive by notebook cells:\n  +8.0 MiB at In [4] line 2\n"), "{diff}{run}");
    // Since the snapshot after cell 2 (before either leak): both.
    let since = cell_output(&run.stdout, 5, &run);
    assert!(since.contains("live         0 B -> 16.0 MiB (+16.0 MiB) in 0 -> 2 allocations"), "{since}{run}");
    // `%gpushim diff` at the end of the cell that leaks: that cell's 4 MiB (not the previous
    // cell's diff again), at the cell that ran it (In [11] line 1), in the function In [10]
    // defined (line 3).
    let end = cell_output(&run.stdout, 10, &run);
    assert!(end.contains("live         16.0 MiB -> 20.0 MiB (+4.0 MiB)"), "{end}{run}");
    assert!(
        end.ends_with("left alive by notebook cells:\n  +4.0 MiB at In [11] line 1 (in In [10] line 3)\n"),
        "{end}{run}"
    );
    let mine = PathBuf::from(cell_output(&run.stdout, 6, &run).trim());
    assert!(mine.to_str().unwrap().ends_with("-mine.json") && mine.starts_with(&dir), "{run}");
    let mine_json = read_json(&mine, &run);
    assert_eq!(total(&mine_json, "live_bytes"), 16 << 20, "{run}");
    // The file the user asked for names the cells as the notebook does (the frame's `cell`),
    // and so does `gpushim report` of it, outside the notebook: not IPython's file for the cell.
    let cells: Vec<&str> = mine_json["sites"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["frames"].as_array().unwrap())
        .filter_map(|f| f["cell"].as_str())
        .collect();
    assert!(cells.contains(&"In [4] line 2"), "{cells:?}{run}");
    let text = gpushim(["report", mine.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("<module> (In [4] line 2)") && !text.contains("(ipykernel_"), "{text}{run}");
    let report = cell_output(&run.stdout, 7, &run);
    assert!(report.contains("live: 16.0 MiB in 2 allocations"), "{report}{run}");
    // The report names the cell as the diff does, not by IPython's file for it.
    assert!(report.contains("<module> (In [4] line 2)") && !report.contains("(ipykernel_"), "{report}{run}");
    assert_eq!(cell_output(&run.stdout, 8, &run).trim(), "tracing True", "{run}");
}

/// `%gpushim keep` keeps the per-cell snapshots when the kernel ends, in the directory it
/// names.
#[test]
fn jupyter_kernel_keeps_the_cell_snapshots_when_asked() {
    let py = venv_python();
    assert_imports(&py, "ipykernel, jupyter_client");
    let t = Target::new(&py, "pyapi_jupyter_keep").preload(None);
    let dir = t.dir.path().to_path_buf();
    let prefix = dir.join("prefix");
    install_kernel("gpushim-keep", &prefix, &py);
    let driver = dir.join("driver.py");
    std::fs::write(&driver, KERNEL_DRIVER).unwrap();
    let cells = dir.join("cells.json");
    std::fs::write(&cells, r#"["%load_ext gpushim", "x = 1", "%gpushim keep"]"#).unwrap();
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let run = t
        .args(&[driver.to_str().unwrap(), "gpushim-keep", cells.to_str().unwrap()])
        .env("JUPYTER_PATH", prefix.join("share/jupyter").display())
        .env("JUPYTER_RUNTIME_DIR", dir.join("runtime").display())
        .env("IPYTHONDIR", dir.join("ipython").display())
        .env("PYTHONPATH", package_dir().display())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("TMPDIR", tmp.display())
        .run();
    run.success();
    let said = cell_output(&run.stdout, 2, &run).trim();
    let kept = PathBuf::from(said.strip_prefix("gpushim: the per-cell snapshots will be kept in ").unwrap_or_default());
    assert!(kept.starts_with(&tmp), "{said}{run}");
    let names = names_in(&kept);
    assert!(
        names.iter().any(|n| n.ends_with("-load.json")) && names.iter().any(|n| n.ends_with("-cell2.json")),
        "{names:?}{run}"
    );
    // Without its lock file, a later kernel's clean-up leaves it alone.
    assert!(!names.iter().any(|n| n == ".lock"), "{names:?}{run}");
    // The kernel made no CUDA allocation: no final report (its collector, started by the
    // snapshots, says so on the kernel's stderr instead).
    let reports: Vec<String> =
        names_in(&dir).into_iter().filter(|n| n.starts_with("gpushim-") && n.ends_with(".json")).collect();
    assert!(reports.is_empty(), "{reports:?}{run}");
}

/// A snapshot whose answer never comes, and one with recording off.
const NO_ANSWER: &str = r#"import sys
import time

import gpushim

t = time.monotonic()
print("snap", gpushim.snapshot("x", timeout=float(sys.argv[1])), flush=True)
print("waited", round(time.monotonic() - t, 1), flush=True)
print("tracing", gpushim.is_tracing(), flush=True)
"#;

/// A collector that reads the stream and never answers: `snapshot(timeout=0.5)` returns None
/// after about half a second, saying why, and the program goes on.
#[test]
fn snapshot_wait_is_bounded_by_its_timeout() {
    let t = Target::new(python3(), "pyapi_timeout");
    let fake = script(t.dir.path(), "silent-collector", "#!/bin/sh\nexec cat >/dev/null\n");
    let prog = t.dir.path().join("noanswer.py");
    std::fs::write(&prog, NO_ANSWER).unwrap();
    let run = t
        .args(&[prog.to_str().unwrap(), "0.5"])
        .env("GPUSHIM_COLLECTOR", fake.display())
        .env("GPUSHIM_EXIT_TIMEOUT", "2")
        .env("PYTHONPATH", package_dir().display())
        .run();
    run.success();
    assert_eq!(printed(&run.stdout, "snap", &run), "None", "{run}");
    let waited: f64 = printed(&run.stdout, "waited", &run).parse().unwrap();
    assert!((0.5..3.0).contains(&waited), "waited {waited} s for a 0.5 s timeout{run}");
    assert!(
        run.stderr.contains("gpushim: snapshot not written: the collector did not confirm the snapshot in time"),
        "{run}"
    );
}

/// A collector that cannot be started: recording is off, `snapshot()` says so and returns
/// None at once, `is_tracing()` turns False.
#[test]
fn snapshot_without_a_collector_says_recording_is_off() {
    let t = Target::new(python3(), "pyapi_nocollector");
    let prog = t.dir.path().join("noanswer.py");
    std::fs::write(&prog, NO_ANSWER).unwrap();
    let run = t
        .args(&[prog.to_str().unwrap(), "20"])
        .env("GPUSHIM_COLLECTOR", "/nonexistent/gpushim")
        .env("PYTHONPATH", package_dir().display())
        .run();
    run.success();
    assert_eq!(printed(&run.stdout, "snap", &run), "None", "{run}");
    let waited: f64 = printed(&run.stdout, "waited", &run).parse().unwrap();
    assert!(waited < 5.0, "waited {waited} s{run}");
    assert_eq!(printed(&run.stdout, "tracing", &run), "False", "{run}");
    assert!(run.stderr.contains("gpushim: snapshot not written: recording is off"), "{run}");
}
