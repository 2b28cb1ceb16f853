//! Python frames: a CPython program calls the runtime stand-in through ctypes (which releases
//! the GIL around the call) from nested functions, from a `threading.Thread`, and from a native
//! pthread with no Python on it; the report's sites show the Python frames with the exact lines
//! of the calls, innermost first, where the interpreter's native frames were.
//!
//! `python3` on PATH is required (CI has 3.11). Other interpreters are tested too when
//! `GPUSHIM_TEST_PYTHONS` lists them (colon-separated paths) or, failing that, when pyenv has
//! 3.10, 3.12 or 3.13 installed.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::util::*;

/// The test program. `# @name` marks the lines whose numbers the report must show.
const SCRIPT: &str = r#"import ctypes
import sys
import threading

cudart = ctypes.CDLL(sys.argv[1])
native = ctypes.CDLL(sys.argv[2])
keep = []


def inner(n):
    p = ctypes.c_void_p()
    rc = cudart.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(n))  # @malloc
    if rc != 0:
        raise SystemExit(f"cudaMalloc returned {rc}")
    keep.append(p.value)


def outer(n):
    inner(n)  # @outer


for _ in range(3):
    outer(1 << 20)  # @loop
inner(4096)  # @direct
t = threading.Thread(target=outer, args=(2 << 20,))
t.start()
t.join()
if native.alloc_in_native_thread(ctypes.c_size_t(8192)) != 0:
    raise SystemExit("allocation in the native thread failed")
print("allocated", len(keep))
"#;

/// A pthread started by native code: it has no Python thread state.
const NATIVE_THREAD_C: &str = r#"
#include <pthread.h>
#include <stddef.h>
int cudaMalloc(void **p, size_t n);
__attribute__((noinline)) static void *native_thread_body(void *arg) {
    void *p = NULL;
    return (void *)(size_t)(cudaMalloc(&p, (size_t)arg) != 0 || p == NULL);
}
int alloc_in_native_thread(size_t n) {
    pthread_t t;
    void *failed = (void *)1;
    if (pthread_create(&t, NULL, native_thread_body, (void *)n) != 0) return 1;
    pthread_join(t, &failed);
    return failed != NULL;
}
"#;

/// The 1-based number of the line of `text` marked `# @name`.
fn line_in(text: &str, marker: &str) -> u64 {
    let tag = format!("# @{marker}");
    text.lines().position(|l| l.ends_with(&tag)).unwrap_or_else(|| panic!("no {tag} in the script")) as u64 + 1
}

/// The 1-based number of the `SCRIPT` line marked `# @name`.
fn line_of(marker: &str) -> u64 {
    line_in(SCRIPT, marker)
}

/// Runs the Python program `text` (written to `file` in the target's directory, given the
/// runtime stand-in's path as its argument) with `python` under the shim, with
/// `GPUSHIM_UNWIND_CACHE=cache`; it must succeed.
fn run_with_cache(python: &Path, name: &str, file: &str, text: &str, cache: &str) -> Outcome {
    let t = Target::new(python, name);
    let script = t.dir.path().join(file);
    std::fs::write(&script, text).unwrap();
    let cudart = standin("libcudart.so.13");
    let run = t
        .args(&[script.to_str().unwrap(), cudart.to_str().unwrap()])
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("GPUSHIM_UNWIND_CACHE", cache)
        .run();
    run.success();
    run
}

/// The interpreter `python3` on PATH runs (through a pyenv shim, if that is what PATH has).
pub(crate) fn python3() -> PathBuf {
    let which = Command::new("which").arg("python3").output().expect("running which");
    let path = String::from_utf8_lossy(&which.stdout).trim().to_string();
    assert!(
        which.status.success() && !path.is_empty(),
        "python3 is not on PATH: the Python frame tests need CPython 3.10 to 3.13 as `python3` (CI has 3.11)"
    );
    real_executable(Path::new(&path)).unwrap_or_else(|| panic!("{path} -c 'import sys' failed"))
}

/// `sys.executable` of `python`: the real binary behind a shim script.
pub(crate) fn real_executable(python: &Path) -> Option<PathBuf> {
    let out = Command::new(python).args(["-c", "import sys; print(sys.executable)"]).output().ok()?;
    let exe = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && !exe.is_empty()).then(|| PathBuf::from(exe))
}

/// Other interpreters to run the scenario under: `GPUSHIM_TEST_PYTHONS`, else pyenv's 3.10, 3.12
/// and 3.13 if installed.
pub(crate) fn other_pythons() -> Vec<PathBuf> {
    if let Ok(list) = std::env::var("GPUSHIM_TEST_PYTHONS") {
        return list.split(':').filter(|s| !s.is_empty()).map(PathBuf::from).collect();
    }
    let Ok(out) = Command::new("pyenv").args(["versions", "--bare"]).output() else { return Vec::new() };
    let mut found = Vec::new();
    for v in String::from_utf8_lossy(&out.stdout).lines().map(str::trim) {
        if ["3.10.", "3.12.", "3.13."].iter().any(|p| v.starts_with(p)) && !v.contains('t') {
            if let Ok(p) = Command::new("pyenv").args(["prefix", v]).output() {
                let prefix = String::from_utf8_lossy(&p.stdout).trim().to_string();
                let py = Path::new(&prefix).join("bin/python3");
                if p.status.success() && py.exists() {
                    found.push(py);
                }
            }
        }
    }
    found
}

/// Builds the native-thread helper library into `dir`.
fn native_helper(dir: &Path) -> PathBuf {
    let src = dir.join("native_thread.c");
    std::fs::write(&src, NATIVE_THREAD_C).unwrap();
    build_helper(&src, &dir.join("libnative_thread.so"))
}

/// Builds the C file `src` into the shared library `lib`, linked to the runtime stand-in.
fn build_helper(src: &Path, lib: &Path) -> PathBuf {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc)
        .args(["-shared", "-fPIC", "-g", "-O0", "-o"])
        .arg(lib)
        .arg(src)
        .arg(format!("-L{}", standins().display()))
        .args(["-l:libcudart.so.13", "-lpthread"])
        .arg(format!("-Wl,-rpath,{}", standins().display()))
        .status()
        .unwrap_or_else(|e| panic!("cannot run {cc}: {e}"));
    assert!(status.success(), "{cc} failed to build {}", src.display());
    lib.to_path_buf()
}

/// `python` running the script under the shim (the script and its native helper written to the
/// target's directory), and the script's path.
fn script_target(python: &Path, name: &str) -> (Target, PathBuf) {
    let t = Target::new(python, name);
    let script = t.dir.path().join("alloc.py");
    std::fs::write(&script, SCRIPT).unwrap();
    let helper = native_helper(t.dir.path());
    let cudart = standin("libcudart.so.13");
    let t = t.args(&[script.to_str().unwrap(), cudart.to_str().unwrap(), helper.to_str().unwrap()]);
    (t, script)
}

/// Runs the script under the shim with `python` and returns the run and its report.
fn run_script(python: &Path, name: &str) -> (Outcome, Value, PathBuf) {
    let (t, script) = script_target(python, name);
    let run = t.env("PYTHONDONTWRITEBYTECODE", "1").run();
    run.success();
    assert!(run.stdout.contains("allocated 5"), "{run}");
    let r = run.report();
    (run, r, script)
}

fn frames(site: &Value) -> &Vec<Value> {
    site["frames"].as_array().unwrap()
}

fn is_python(f: &Value) -> bool {
    f["python"] == true
}

/// `function:line` of each Python frame of `site`, innermost first.
fn python_frames(site: &Value) -> Vec<String> {
    frames(site)
        .iter()
        .filter(|f| is_python(f))
        .map(|f| format!("{}:{}", f["function"].as_str().unwrap(), f["line"]))
        .collect()
}

/// The one site with `bytes` live.
fn site_with<'a>(r: &'a Value, bytes: u64, run: &Outcome) -> &'a Value {
    let s: Vec<&Value> = r["sites"].as_array().unwrap().iter().filter(|s| s["live_bytes"] == bytes).collect();
    assert_eq!(s.len(), 1, "one site with {bytes} live bytes{run}\n{r:#}");
    s[0]
}

/// The sites whose Python frames satisfy `pick` (more than one where the native stacks differ,
/// as when a later call takes a specialized path of the interpreter), with their live bytes
/// summed.
fn sites_where(r: &Value, pick: impl Fn(&[String]) -> bool) -> (Vec<&Value>, u64) {
    let s: Vec<&Value> = r["sites"].as_array().unwrap().iter().filter(|s| pick(&python_frames(s))).collect();
    let bytes = s.iter().map(|s| s["live_bytes"].as_u64().unwrap()).sum();
    (s, bytes)
}

/// The checks every supported version must pass.
fn check_report(r: &Value, run: &Outcome, script: &Path) {
    let (malloc, outer, lp, direct) = (line_of("malloc"), line_of("outer"), line_of("loop"), line_of("direct"));
    assert_eq!(total(r, "live_count"), 6, "{run}");

    // outer() → inner() three times from the loop.
    let want = [format!("inner:{malloc}"), format!("outer:{outer}"), format!("<module>:{lp}")];
    let (looped, bytes) = sites_where(r, |p| p == want);
    assert_eq!(bytes, 3 << 20, "Python frames {want:?} on 3 MiB{run}\n{r:#}");
    for site in &looped {
        assert_eq!(site["python"], true, "{run}");
        let fs = frames(site);
        let first = fs.iter().position(is_python).unwrap();
        // Innermost native frames first (the stand-in and ctypes), then the Python frames where
        // the interpreter's frames stood: no interpreter-loop frame is left between or after them.
        assert!(first > 0 && !is_python(&fs[first - 1]), "{site:#}");
        assert!(fs[..first].iter().any(|f| f["module"].as_str().is_some_and(|m| m.contains("_ctypes"))), "{site:#}");
        assert!(
            !fs.iter().any(|f| f["function"].as_str().is_some_and(|n| n.starts_with("_PyEval_EvalFrameDefault"))),
            "every interpreter frame is replaced by its Python frames{run}\n{site:#}"
        );
        assert!(fs.last().is_some_and(|f| !is_python(f)), "native frames stay below the Python frames{site:#}");
        let f = &fs[first];
        assert_eq!(f["file"], script.to_str().unwrap(), "{f:#}");
        assert_eq!(
            (&f["module"], &f["address"], &f["internal"]),
            (&Value::from("python"), &Value::from(""), &Value::from(false)),
            "{f:#}"
        );
    }

    // inner() called from the module directly: sites of their own.
    let want = [format!("inner:{malloc}"), format!("<module>:{direct}")];
    let (direct_sites, bytes) = sites_where(r, |p| p == want);
    assert_eq!(bytes, 4096, "Python frames {want:?} on 4 KiB{run}\n{r:#}");
    assert!(direct_sites.iter().all(|d| looped.iter().all(|l| l["id"] != d["id"])), "{run}");

    // A threading.Thread: the thread's own Python frames, down to threading.py.
    let head = [format!("inner:{malloc}"), format!("outer:{outer}")];
    let (threaded, bytes) =
        sites_where(r, |p| p.len() > 2 && p[..2] == head && p[2..].iter().any(|f| f.contains("run:")));
    assert_eq!(bytes, 2 << 20, "thread's Python frames{run}\n{r:#}");
    for site in threaded {
        assert_eq!(site["python"], true, "{run}");
        assert!(
            frames(site)
                .iter()
                .any(|f| is_python(f) && f["file"].as_str().is_some_and(|p| p.ends_with("threading.py"))),
            "{site:#}"
        );
    }

    // A native pthread: no Python frames, and the site says so.
    let native = site_with(r, 8192, run);
    assert_eq!(native["python"], false, "{run}\n{native:#}");
    assert!(python_frames(native).is_empty(), "{native:#}");
    assert!(site_has(native, "native_thread_body"), "{native:#}");
}

#[test]
fn python_frames_show_file_function_and_line_where_the_interpreter_was() {
    let python = python3();
    let (run, r, script) = run_script(&python, "py-default");
    check_report(&r, &run, &script);
    // The two sites of inner() differ only in their Python frames: the native stacks are the
    // same, so the Python frames must be part of what makes a site.
    let native = |bytes: u64| -> Vec<Value> {
        frames(site_with(&r, bytes, &run)).iter().filter(|f| !is_python(f)).map(|f| f["address"].clone()).collect()
    };
    assert_eq!(native(3 << 20), native(4096), "{run}");
}

#[test]
fn python_frames_on_other_interpreters() {
    let others = other_pythons();
    if others.is_empty() {
        eprintln!("no other CPython found (set GPUSHIM_TEST_PYTHONS); only python3 was tested");
    }
    for py in others {
        let Some(exe) = real_executable(&py) else { panic!("{} does not run", py.display()) };
        let (run, r, script) = run_script(&exe, "py-other");
        check_report(&r, &run, &script);
    }
}

#[test]
fn python_frames_can_be_switched_off_and_native_programs_have_no_python_field() {
    let python = python3();
    let (t, _) = script_target(&python, "py-off");
    let run = t.env("GPUSHIM_PYTHON", "0").run();
    run.success();
    let r = run.report();
    for s in r["sites"].as_array().unwrap() {
        assert!(s.get("python").is_none() && python_frames(s).is_empty(), "{run}\n{s:#}");
    }
    let run = Target::new("target_dynamic", "py-native").args(&["kinds"]).run();
    run.success();
    for s in run.report()["sites"].as_array().unwrap() {
        assert!(s.get("python").is_none(), "{run}");
        assert!(frames(s).iter().all(|f| f.get("python").is_none()), "{run}");
    }
}

/// Issue 18's test program: allocations in a loop from two Python call paths over the same native
/// frames, then a fork; the child first runs code made after the fork (new code objects, so its
/// code ids differ from the parent's), then the same loop.
const PATHS_SCRIPT: &str = r#"import ctypes
import os
import sys

cudart = ctypes.CDLL(sys.argv[1])
keep = []


def alloc(n):
    p = ctypes.c_void_p()
    if cudart.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(n)) != 0:
        raise SystemExit("cudaMalloc failed")
    keep.append(p.value)


def path_a(n):
    alloc(n)


def path_b(n):
    alloc(n)


def loop(k):
    for i in range(k):
        if i % 2 == 0:
            path_a(4096)
        else:
            path_b(8192)


loop(300)
sys.stdout.flush()
pid = os.fork()
if pid == 0:
    exec("def fresh(n):\n    alloc(n)\n", globals())
    fresh(12288)
    loop(300)
    os._exit(0)
_, status = os.waitpid(pid, 0)
print("child", status)
"#;

/// Per report (parent first), each site as (its Python frames, live bytes, allocations), sorted.
fn python_sites(cache: &str) -> Vec<Vec<(Vec<String>, u64, u64)>> {
    let run = run_with_cache(&python3(), &format!("py-paths-cache-{cache}"), "paths.py", PATHS_SCRIPT, cache);
    assert!(run.stdout.contains("child 0"), "{run}");
    let mut reports: Vec<Value> = run.reports().into_values().collect();
    assert_eq!(reports.len(), 2, "{run}");
    // The child's report has 12 KiB more live (its `fresh` allocation).
    reports.sort_by_key(|r| total(r, "live_bytes"));
    reports
        .iter()
        .map(|r| {
            let mut v: Vec<_> = r["sites"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| (python_frames(s), s["live_bytes"].as_u64().unwrap(), s["alloc_count"].as_u64().unwrap()))
                .collect();
            v.sort();
            v
        })
        .collect()
}

/// Issue 18: the per-thread memo of Python code ids (and the thread's previous stack) leave every
/// site's Python frames and totals as they are without them, in a loop over two call paths and
/// in a forked child, whose code ids start again from 0 (a stale memo there would give the
/// child's frames the parent's ids).
#[test]
fn python_frame_caches_leave_sites_unchanged_across_fork() {
    let on = python_sites("1");
    let off = python_sites("0");
    assert_eq!(on, off, "the same sites with GPUSHIM_UNWIND_CACHE=1 and 0");
    let (parent, child) = (&on[0], &on[1]);
    let bytes = |sites: &[(Vec<String>, u64, u64)], f: &str| -> u64 {
        sites
            .iter()
            .filter(|s| {
                s.0.first().is_some_and(|x| x.starts_with("alloc:")) && s.0.get(1).is_some_and(|x| x.starts_with(f))
            })
            .map(|s| s.1)
            .sum()
    };
    assert_eq!(bytes(parent, "path_a:"), 150 * 4096, "{parent:#?}");
    assert_eq!(bytes(parent, "path_b:"), 150 * 8192, "{parent:#?}");
    assert_eq!(bytes(child, "path_a:"), 150 * 4096, "{child:#?}");
    assert_eq!(bytes(child, "path_b:"), 150 * 8192, "{child:#?}");
    assert_eq!(bytes(child, "fresh:"), 12288, "{child:#?}");
}

/// A stand-in for PyTorch's backward pass: the autograd engine's thread (named as PyTorch names
/// it) allocates while the Python thread that started the pass waits in native code.
/// With `with_state`, the thread first makes itself a Python thread state and releases the GIL,
/// as PyTorch's `PythonEngine::thread_init` does (its frame chain stays empty).
const ENGINE_C: &str = r#"
#define _GNU_SOURCE /* pthread_setname_np */
#include <pthread.h>
#include <stddef.h>
int cudaMalloc(void **p, size_t n);
int PyGILState_Ensure(void);
void PyGILState_Release(int);
void *PyEval_SaveThread(void);
void PyEval_RestoreThread(void *);
static size_t bytes;
__attribute__((noinline)) static void *engine_thread_main(void *with_state) {
    void *p = NULL, *saved = NULL;
    int g = 0;
    pthread_setname_np(pthread_self(), "pt_autograd_0");
    if (with_state) {
        g = PyGILState_Ensure();
        saved = PyEval_SaveThread();
    }
    int failed = cudaMalloc(&p, bytes) != 0 || p == NULL;
    if (with_state) {
        PyEval_RestoreThread(saved);
        PyGILState_Release(g);
    }
    return (void *)(size_t)failed;
}
int run_backward(size_t n, int with_state) {
    pthread_t t;
    void *failed = (void *)1;
    bytes = n;
    if (pthread_create(&t, NULL, engine_thread_main, (void *)(size_t)with_state) != 0) return 1;
    pthread_join(t, &failed);
    return failed != NULL;
}
"#;

/// The stand-in's Python side, as torch/autograd/graph.py and torch/_tensor.py call it; every
/// other step's engine thread has a thread state, as PyTorch's have.
const ENGINE_PY: &str = r#"import ctypes
import sys

engine = ctypes.CDLL(sys.argv[2])


def _engine_run_backward(n, with_state):
    if engine.run_backward(ctypes.c_size_t(n), with_state) != 0:  # @engine
        raise SystemExit("the engine thread's allocation failed")


def backward(n, with_state):
    _engine_run_backward(n, with_state)  # @run
"#;

const BACKWARD_SCRIPT: &str = r#"import ctypes
import sys
import time

sys.path.insert(0, sys.argv[3])
import fakeautograd  # noqa: E402

ctypes.CDLL(sys.argv[1])
for i in range(30):
    fakeautograd.backward(1 << 20, i % 2)  # @backward
    time.sleep(0.01)  # a training step's pace: the growth is spread over the run
print("backward done")
"#;

#[test]
fn an_autograd_engine_threads_allocation_gets_the_python_line_that_started_the_backward() {
    // Every interpreter this machine has: the thread list and the other thread's frames are
    // read with each version's layout.
    for python in std::iter::once(python3()).chain(other_pythons()) {
        backward_on_an_engine_thread(&python);
    }
}

fn backward_on_an_engine_thread(python: &Path) {
    let t = Target::new(python, "py-autograd");
    let dir = t.dir.path().to_path_buf();
    let pkg = dir.join("pkg");
    std::fs::create_dir_all(&pkg).unwrap();
    std::fs::write(pkg.join("fakeautograd.py"), ENGINE_PY).unwrap();
    let script = dir.join("train.py");
    std::fs::write(&script, BACKWARD_SCRIPT).unwrap();
    let src = dir.join("engine.c");
    std::fs::write(&src, ENGINE_C).unwrap();
    let lib = build_helper(&src, &dir.join("libfakeengine.so"));
    let cudart = standin("libcudart.so.13");
    let run = t
        .args(&[script.to_str().unwrap(), cudart.to_str().unwrap(), lib.to_str().unwrap(), pkg.to_str().unwrap()])
        .env("PYTHONDONTWRITEBYTECODE", "1")
        // The stand-ins are the framework's code, as torch's files and libtorch are.
        .env("GPUSHIM_INTERNAL_MODULES", "*/pkg/*,libfakeengine.so")
        .run();
    run.success();
    assert!(run.stdout.contains("backward done"), "{run}");
    let r = run.report();
    let line = line_in(BACKWARD_SCRIPT, "backward");
    let site = site_with(&r, 30 << 20, &run);
    let which = python.display();
    // The engine's native frames, then the waiting thread's Python frames.
    assert!(site_has(site, "engine_thread_main"), "{site:#}");
    assert_eq!(
        python_frames(site),
        vec![
            format!("_engine_run_backward:{}", line_in(ENGINE_PY, "engine")),
            format!("backward:{}", line_in(ENGINE_PY, "run")),
            format!("<module>:{line}")
        ],
        "{which}{run}\n{site:#}"
    );
    assert_eq!(site["python"], true, "{which}{run}");
    let s = r["suspects"].as_array().unwrap().iter().find(|s| s["site"] == site["id"]).cloned();
    // A suspect (30 steps, each keeping 1 MiB), headed by the line that started the backward
    // pass, with the thread named; the headline gives a file's last two path components.
    let s = s.unwrap_or_else(|| panic!("no suspect at the site{which}{run}"));
    let dir_name = dir.file_name().unwrap().to_string_lossy();
    let want = format!("<module> ({dir_name}/train.py:{line}) via backward (autograd thread)");
    assert_eq!(s["headline"], want, "{which}{run}");
}

/// The engine thread's memo of the waiting thread's frames (shim/src/python/borrow.rs): each
/// backward pass allocates several times on the engine thread, and the passes alternate between
/// two lines of one function called at the same depth, so that every frame of the two chains is
/// at the same address and only the outermost one's instruction differs. A memo kept past its
/// pass would give one line's bytes to the other.
const MANY_C: &str = r#"
#define _GNU_SOURCE /* pthread_setname_np */
#include <pthread.h>
#include <stddef.h>
int cudaMalloc(void **p, size_t n);
int PyGILState_Ensure(void);
void PyGILState_Release(int);
void *PyEval_SaveThread(void);
void PyEval_RestoreThread(void *);
/* One engine thread for the whole run, as PyTorch keeps its device threads: each pass hands it
   work and waits for it to be done. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static size_t bytes, count, posted, done, failed;
static int started;
static pthread_t engine;
__attribute__((noinline)) static void *engine_thread_main(void *arg) {
    void *p = NULL;
    (void)arg;
    pthread_setname_np(pthread_self(), "pt_autograd_0");
    int g = PyGILState_Ensure();
    void *saved = PyEval_SaveThread();
    for (;;) {
        pthread_mutex_lock(&lock);
        while (done == posted) pthread_cond_wait(&cond, &lock);
        pthread_mutex_unlock(&lock);
        size_t bad = 0;
        for (size_t i = 0; i < count; i++) bad |= cudaMalloc(&p, bytes) != 0 || p == NULL;
        pthread_mutex_lock(&lock);
        failed |= bad;
        done++;
        pthread_cond_broadcast(&cond);
        pthread_mutex_unlock(&lock);
    }
    PyEval_RestoreThread(saved);
    PyGILState_Release(g);
    return NULL;
}
int run_backward(size_t n, size_t k) {
    if (!started) {
        if (pthread_create(&engine, NULL, engine_thread_main, NULL) != 0) return 1;
        started = 1;
    }
    pthread_mutex_lock(&lock);
    bytes = n;
    count = k;
    posted++;
    pthread_cond_broadcast(&cond);
    while (done != posted) pthread_cond_wait(&cond, &lock);
    size_t bad = failed;
    pthread_mutex_unlock(&lock);
    return bad != 0;
}
"#;

const MANY_PY: &str = r#"import ctypes
import sys

engine = ctypes.CDLL(sys.argv[2])


def _engine_run_backward(n, k):
    if engine.run_backward(ctypes.c_size_t(n), ctypes.c_size_t(k)) != 0:  # @engine
        raise SystemExit("the engine thread's allocation failed")


def step(i):
    if i % 2:
        _engine_run_backward(4096, 10)  # @odd
    else:
        _engine_run_backward(8192, 10)  # @even


ctypes.CDLL(sys.argv[1])
for i in range(20):
    step(i)  # @step
print("backward done")
"#;

#[test]
fn each_backward_pass_gives_the_engine_threads_allocations_its_own_line() {
    let t = Target::new(python3(), "py-autograd-many");
    let dir = t.dir.path().to_path_buf();
    let script = dir.join("train.py");
    std::fs::write(&script, MANY_PY).unwrap();
    let src = dir.join("engine.c");
    std::fs::write(&src, MANY_C).unwrap();
    let lib = build_helper(&src, &dir.join("libfakeengine.so"));
    let cudart = standin("libcudart.so.13");
    let run = t
        .args(&[script.to_str().unwrap(), cudart.to_str().unwrap(), lib.to_str().unwrap()])
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("GPUSHIM_INTERNAL_MODULES", "libfakeengine.so")
        .run();
    run.success();
    assert!(run.stdout.contains("backward done"), "{run}");
    let r = run.report();
    let engine = format!("_engine_run_backward:{}", line_in(MANY_PY, "engine"));
    let module = format!("<module>:{}", line_in(MANY_PY, "step"));
    for (marker, bytes) in [("odd", 4096u64), ("even", 8192)] {
        let want = vec![engine.clone(), format!("step:{}", line_in(MANY_PY, marker)), module.clone()];
        let (sites, live) = sites_where(&r, |f| f == want.as_slice());
        // Ten passes from this line, ten allocations each, all of them with its frames.
        assert_eq!(live, 10 * 10 * bytes, "{marker}: {sites:#?}{run}\n{r:#}");
    }
    let all: u64 = r["sites"].as_array().unwrap().iter().map(|s| s["live_bytes"].as_u64().unwrap()).sum();
    assert_eq!(all, 100 * (4096 + 8192), "{run}");
}

/// Issue 18's test of the memo of each thread's previous Python frames (`shim/src/python/fast.rs`):
/// one loop allocates through five paths that share their outer frames (`<module>`, `step`,
/// `outer`) and the innermost one (`alloc`, the same frame memory, code and line every time), and
/// differ in between: the same code at the same depth on another line (`mid` from two lines), a
/// frame's memory reused by another function at the same depth (`other`), one frame more
/// (`deeper`) and a recursion two or four deep (`rec`, one code object over several frames).
/// Then `exec` makes a new code object for each call, freed after it, whose first line moves:
/// one may be given a freed one's address and its frame the same memory (the link is then equal
/// to the remembered one, and only the code object's check fields tell them apart).
const MEMO_SCRIPT: &str = r#"import ctypes
import sys

cudart = ctypes.CDLL(sys.argv[1])
keep = []


def alloc(n):
    p = ctypes.c_void_p()
    if cudart.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(n)) != 0:  # @m_malloc
        raise SystemExit("cudaMalloc failed")
    keep.append(p.value)


def mid(n, k):
    if k == 0:
        alloc(n)  # @m_mid0
    else:
        alloc(n)  # @m_mid1


def other(n, k):
    alloc(n)  # @m_other


def deeper(n, k):
    mid(n, k)  # @m_deeper


def rec(n, k):
    if k > 0:
        rec(n, k - 1)  # @m_rec
    else:
        alloc(n)  # @m_rec_alloc


def outer(f, n, k):
    f(n, k)  # @m_outer


PATHS = [(mid, 4096, 0), (mid, 8192, 1), (other, 12288, 0), (deeper, 16384, 1), (rec, 20480, 2), (rec, 24576, 4)]


def step(i):
    f, n, k = PATHS[i % len(PATHS)]
    outer(f, n, k)  # @m_step


for i in range(60 * len(PATHS)):
    step(i)  # @m_loop
for i in range(40):
    # A new code object each time, freed after its call: the next one may be given its address
    # (and its frame the same memory), with its first line moved by i % 4 blank lines.
    ns = {"alloc": alloc}
    exec("\n" * (i % 4) + "def f(n):\n    alloc(n)\n", ns)
    f = ns.pop("f")
    f(4096 * (1 + i % 4))  # @m_exec
    ns.clear()
    del f
print("allocated", len(keep))
"#;

/// The 1-based number of the `MEMO_SCRIPT` line marked `# @name`.
fn memo_line(marker: &str) -> u64 {
    line_in(MEMO_SCRIPT, marker)
}

/// Runs `MEMO_SCRIPT` with `python` and `GPUSHIM_UNWIND_CACHE=cache`: per distinct Python stack
/// (function:line, innermost first), its live bytes and allocations, sorted.
fn memo_sites(python: &Path, name: &str, cache: &str) -> Vec<(Vec<String>, u64, u64)> {
    let run = run_with_cache(python, name, "memo.py", MEMO_SCRIPT, cache);
    assert!(run.stdout.contains("allocated 400"), "{run}");
    let r = run.report();
    // Sites whose native stacks differ (a specialized instruction's path) but whose Python
    // frames are the same are summed.
    let mut by: std::collections::BTreeMap<Vec<String>, (u64, u64)> = Default::default();
    for s in r["sites"].as_array().unwrap() {
        let e = by.entry(python_frames(s)).or_default();
        e.0 += s["live_bytes"].as_u64().unwrap();
        e.1 += s["alloc_count"].as_u64().unwrap();
    }
    by.into_iter().map(|(k, (b, c))| (k, b, c)).collect()
}

/// The stacks `MEMO_SCRIPT` must show: each path's Python frames, with 60 allocations of its size.
fn memo_expected() -> Vec<(Vec<String>, u64, u64)> {
    let l = memo_line;
    let at = |f: &str, m: &str| format!("{f}:{}", l(m));
    let head = |v: Vec<String>| {
        let mut s = vec![at("alloc", "m_malloc")];
        s.extend(v);
        s.extend([at("outer", "m_outer"), at("step", "m_step"), at("<module>", "m_loop")]);
        s
    };
    let rec = |k: usize| {
        let mut v = vec![at("rec", "m_rec_alloc")];
        v.extend((0..k).map(|_| at("rec", "m_rec")));
        head(v)
    };
    let mut want = vec![
        (head(vec![at("mid", "m_mid0")]), 60 * 4096, 60),
        (head(vec![at("mid", "m_mid1")]), 60 * 8192, 60),
        (head(vec![at("other", "m_other")]), 60 * 12288, 60),
        (head(vec![at("mid", "m_mid1"), at("deeper", "m_deeper")]), 60 * 16384, 60),
        (rec(2), 60 * 20480, 60),
        (rec(4), 60 * 24576, 60),
    ];
    // exec'd `f`: its call of alloc is on line 2 + i % 4 of its source.
    want.extend((0..4u64).map(|r| {
        (vec![at("alloc", "m_malloc"), format!("f:{}", 2 + r), at("<module>", "m_exec")], 10 * 4096 * (1 + r), 10)
    }));
    want.sort();
    want
}

/// Issue 18: with the memo, each allocation's Python frames are the ones it was made from, where
/// an outer frame changes between two allocations at the same depth (same code, another line),
/// where a frame's memory is reused by another function at the same depth, where the depth
/// changes, through recursion, and where a code object is freed and another takes its place; and the same as without the memo
/// (`GPUSHIM_UNWIND_CACHE=0`), on every interpreter the tests find.
#[test]
fn python_frame_memo_reports_each_allocations_own_frames() {
    let mut pythons = vec![python3()];
    for py in other_pythons() {
        pythons.push(real_executable(&py).unwrap_or_else(|| panic!("{} does not run", py.display())));
    }
    for py in pythons {
        let on = memo_sites(&py, "py-memo-on", "1");
        assert_eq!(on, memo_expected(), "{}", py.display());
        let off = memo_sites(&py, "py-memo-off", "0");
        assert_eq!(on, off, "{}: the same sites with GPUSHIM_UNWIND_CACHE=1 and 0", py.display());
    }
}
