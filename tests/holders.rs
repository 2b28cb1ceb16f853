//! Who holds the memory: a CPython program (tests/programs/holders.py) holds objects with
//! `__cuda_array_interface__` over stand-in allocations in a global list, a global, a closure,
//! an unreachable cycle, another thread's frame, and a dict it then dropped; the heap walk's
//! companion files name each holder with its exact path and bytes, at a snapshot and at exit,
//! without running the objects' `__getattr__`, without leaving a module in `sys.modules` and
//! with the program's disabled GC left disabled; an object held only by a reference from native
//! code is "held from native code"; `gpushim diff` names the holder that grew between the
//! snapshot and exit. Also: a walk cut at its time cap, a snapshot whose main thread is
//! blocked in native code, and a program whose replacements of `__import__` and of module
//! functions must not run.

use std::path::Path;

use serde_json::Value;

use crate::python::{other_pythons, python3, real_executable};
use crate::util::*;

const KIB: u64 = 1024;

/// `holders.py` in `mode` under the shim with `python`.
fn run_holders(python: &Path, name: &str, mode: &str, env: &[(&str, &str)]) -> Outcome {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs/holders.py");
    let cudart = standin("libcudart.so.13");
    let mut t = Target::new(python, name).args(&[script.to_str().unwrap(), cudart.to_str().unwrap(), mode]);
    t = t.env("PYTHONDONTWRITEBYTECODE", "1");
    for (k, v) in env {
        t = t.env(k, v);
    }
    let run = t.run();
    run.success();
    assert!(run.stdout.contains("done"), "{run}");
    run
}

/// The pid of the one final report.
fn pid_of(run: &Outcome) -> u64 {
    run.report()["pid"].as_u64().unwrap()
}

/// The site entry of a holders file with `live` bytes live.
fn site<'a>(h: &'a Value, live: u64, run: &Outcome) -> &'a Value {
    let s: Vec<&Value> = h["sites"].as_array().unwrap().iter().filter(|s| s["live_bytes"] == live).collect();
    assert_eq!(s.len(), 1, "one site with {live} live bytes{run}\n{h:#}");
    s[0]
}

/// (how, path joined with " | ", objects, bytes) of each holder line of a site.
fn lines(s: &Value) -> Vec<(String, String, u64, u64)> {
    s["holders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            let path: Vec<&str> = h["path"].as_array().unwrap().iter().map(|p| p.as_str().unwrap()).collect();
            (
                h["how"].as_str().unwrap().into(),
                path.join(" | "),
                h["objects"].as_u64().unwrap(),
                h["bytes"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn line(how: &str, path: &str, objects: u64, bytes: u64) -> (String, String, u64, u64) {
    (how.into(), path.into(), objects, bytes)
}

/// What every walk of the main scenario must find (`found` objects in all).
fn check_main(h: &Value, run: &Outcome, found: u64) {
    assert_eq!(h["schema"], "gpushim.holders.v1", "{h:#}");
    assert_eq!(h["walk"]["status"], "complete", "{run}\n{h:#}");
    assert_eq!(h["walk"]["objects_found"], found, "{run}\n{h:#}");
    let native = site(h, 48 * KIB, run);
    assert_eq!(lines(native), [line("native", "held from native code: DevBuf", 1, 48 * KIB)], "{h:#}");
    let keep = site(h, 256 * KIB, run);
    assert_eq!(lines(keep), [line("path", "programs/holders.py global 'keep' | list[*]", 4, 256 * KIB)], "{h:#}");
    assert_eq!(
        (&keep["objects"], &keep["in_use_bytes"], &keep["cached_bytes"]),
        (&4.into(), &(256 * KIB).into(), &0.into())
    );
    let model = site(h, 1024 * KIB, run);
    assert_eq!(lines(model), [line("path", "programs/holders.py global 'model'", 1, 512 * KIB)], "{h:#}");
    assert_eq!((&model["in_use_bytes"], &model["cached_bytes"]), (&(512 * KIB).into(), &(512 * KIB).into()));
    let closure = site(h, 32 * KIB, run);
    assert_eq!(
        lines(closure),
        [line("path", "programs/holders.py global 'fn' | function make.<locals>.get closure 'buf'", 1, 32 * KIB)],
        "{h:#}"
    );
    let cycle = site(h, 128 * KIB, run);
    assert_eq!(lines(cycle), [line("cycle", "unreachable reference cycle (Net)", 1, 128 * KIB)], "{h:#}");
    let thread = site(h, 16 * KIB, run);
    let l = lines(thread);
    assert_eq!(l.len(), 1, "{h:#}");
    assert!(
        l[0].1.starts_with("function 'worker' (programs/holders.py:")
            && l[0].1.ends_with(") local 'local_buf' in thread 'loader'"),
        "{h:#}"
    );
    assert_eq!((l[0].2, l[0].3), (1, 16 * KIB));
    let dropped = site(h, 8 * KIB, run);
    assert_eq!(
        (&dropped["objects"], &dropped["in_use_bytes"], &dropped["cached_bytes"]),
        (&0.into(), &0.into(), &(8 * KIB).into())
    );
    assert_eq!(h["unattributed"]["objects"], 0, "{h:#}");
}

fn main_scenario(python: &Path, name: &str) {
    let run = run_holders(python, name, "main", &[]);
    // The walk ran no user __getattr__, imported nothing the program can see, and left the
    // program's disabled GC disabled.
    assert!(run.stdout.contains("gc enabled: False\nnew modules: []\ngetattr calls: 0\n"), "{run}");
    let pid = pid_of(&run);
    let snap = run.read(&format!("gpushim-{pid}-snapshot-1.holders.json"));
    assert_eq!((&snap["reason"], &snap["number"]), (&"snapshot".into(), &1.into()), "{snap:#}");
    check_main(&snap, &run, 9);
    // CPython 3.10 to 3.13 with the standard object header: the native core walked.
    assert_eq!(snap["walk"]["core"], "native", "{snap:#}");
    let exit = run.read(&format!("gpushim-{pid}.holders.json"));
    assert_eq!(exit["reason"], "exit", "{exit:#}");
    check_main(&exit, &run, 10);
    assert_eq!(
        lines(site(&exit, 24 * KIB, &run)),
        [line("path", "programs/holders.py global 'late' | list[*]", 1, 24 * KIB)]
    );
    // `gpushim report` merges the companion file.
    let report = Path::new(run.dir.path()).join(format!("gpushim-{pid}.json"));
    let out = gpushim(["report".as_ref(), report.as_os_str()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("held by: programs/holders.py global 'keep' \u{2192} list[*] \u{2192} 4 objects (256.0 KiB)"),
        "{text}"
    );
    // `gpushim diff` of the snapshot and the final report names the holder that came after.
    let snap_report = Path::new(run.dir.path()).join(format!("gpushim-{pid}-snapshot-1.json"));
    let out = gpushim(["diff".as_ref(), snap_report.as_os_str(), report.as_os_str()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let held: Vec<&str> = text.lines().skip_while(|l| !l.starts_with("holders that grew")).skip(1).collect();
    assert_eq!(
        held,
        ["   +24.0 KiB  0 B -> 24.0 KiB in 0 -> 1 objects: programs/holders.py global 'late' \u{2192} list[*]"],
        "{text}"
    );
}

#[test]
fn heap_walk_names_every_holder_with_its_path_and_bytes() {
    main_scenario(&python3(), "holders-main");
}

/// A holders file without what differs between two runs of one program: its pid, the walk's
/// duration and core, and addresses.
fn comparable(mut v: Value) -> Value {
    fn strip(v: &mut Value) {
        match v {
            Value::Object(m) => {
                m.remove("address");
                m.values_mut().for_each(strip);
            }
            Value::Array(a) => a.iter_mut().for_each(strip),
            _ => {}
        }
    }
    v["pid"] = Value::Null;
    v["walk"]["elapsed_s"] = Value::Null;
    v["walk"]["core"] = Value::Null;
    strip(&mut v);
    v
}

#[test]
fn the_native_core_and_the_python_loop_find_the_same_holders() {
    let native = run_holders(&python3(), "holders-native", "main", &[]);
    let python = run_holders(&python3(), "holders-python", "main", &[("GPUSHIM_HEAP_WALK_NATIVE", "0")]);
    let files = |run: &Outcome, core: &str| -> Vec<Value> {
        let pid = pid_of(run);
        let out: Vec<Value> = [format!("gpushim-{pid}-snapshot-1.holders.json"), format!("gpushim-{pid}.holders.json")]
            .iter()
            .map(|f| run.read(f))
            .collect();
        for h in &out {
            assert_eq!(h["walk"]["core"], core, "{run}\n{h:#}");
        }
        out
    };
    let (n, p) = (files(&native, "native"), files(&python, "python"));
    for (a, b) in n.into_iter().zip(p) {
        assert_eq!(comparable(a), comparable(b));
    }
}

#[test]
fn heap_walk_on_other_interpreters() {
    for py in other_pythons() {
        let Some(exe) = real_executable(&py) else { panic!("{} does not run", py.display()) };
        main_scenario(&exe, "holders-other");
    }
}

#[test]
fn heap_walk_is_cut_at_its_time_cap_and_can_be_switched_off() {
    let run = run_holders(&python3(), "holders-cap", "big", &[("GPUSHIM_HEAP_WALK_MS", "1")]);
    let h = run.read(&format!("gpushim-{}.holders.json", pid_of(&run)));
    assert_eq!(h["walk"]["status"], "cut", "{run}\n{h:#}");
    let visited = h["walk"]["objects_visited"].as_u64().unwrap();
    // The deadline is looked at every 1024 objects; the program holds over 600,000.
    assert!(visited > 0 && visited.is_multiple_of(1024) && visited < 600_000, "{h:#}");
    assert_eq!(h["walk"]["message"], format!("walk cut after {visited} objects (GPUSHIM_HEAP_WALK_MS)"));

    let run = run_holders(&python3(), "holders-off", "big", &[("GPUSHIM_HEAP_WALK", "0")]);
    assert!(!run.files().iter().any(|f| f.contains("holders")), "{run}");
}

#[test]
fn heap_walk_of_a_main_thread_blocked_in_native_code_says_so() {
    let run = run_holders(&python3(), "holders-blocked", "blocked", &[("GPUSHIM_HEAP_WALK_MS", "200")]);
    let pid = pid_of(&run);
    let h = run.read(&format!("gpushim-{pid}-snapshot-1.holders.json"));
    assert_eq!(h["walk"]["status"], "blocked", "{run}\n{h:#}");
    assert!(h["walk"]["elapsed_s"].as_f64().unwrap() >= 0.2, "{h:#}");
    // The given-up walk does nothing when the main thread comes back; the exit walk runs.
    assert!(!run.files().iter().any(|f| f.contains("snapshot-1.holders.1")), "{run}");
    let exit = run.read(&format!("gpushim-{pid}.holders.json"));
    assert_eq!(exit["walk"]["status"], "complete", "{exit:#}");
    assert_eq!(
        lines(site(&exit, 4 * KIB, &run)),
        [line("path", "programs/holders.py global 'keep' | list[*]", 1, 4 * KIB)]
    );
}

/// What no root reaches: a buffer held by an attribute of a class that only a cycle keeps (the
/// walker's own table of types must not read as its holder), and one held by an attribute of
/// an object held from native code (3.11 and 3.12 make an instance's dictionary when the
/// walker reads it, which must not cut the path).
fn unreached_scenario(python: &Path, name: &str) {
    let run = run_holders(python, name, "unreached", &[]);
    let pid = pid_of(&run);
    for f in [format!("gpushim-{pid}-snapshot-1.holders.json"), format!("gpushim-{pid}.holders.json")] {
        let h = run.read(&f);
        assert_eq!(h["walk"]["status"], "complete", "{run}\n{h:#}");
        assert_eq!(lines(site(&h, 40 * KIB, &run)), [line("cycle", "unreachable reference cycle (type)", 1, 40 * KIB)]);
        assert_eq!(
            lines(site(&h, 20 * KIB, &run)),
            [line("native", "held from native code: Holder | Holder.buf", 1, 20 * KIB)]
        );
    }
}

#[test]
fn heap_walk_names_what_no_root_reaches() {
    unreached_scenario(&python3(), "holders-unreached");
    for py in other_pythons() {
        let Some(exe) = real_executable(&py) else { panic!("{} does not run", py.display()) };
        unreached_scenario(&exe, "holders-unreached-other");
    }
}

/// An asyncio program walked three times: on CPython 3.12.0 to 3.12.5 a traversal of the
/// `_asyncio` module visits freed future iterators (python/cpython#122695); a reference taken to
/// one froze the next walk in an endless loop, or crashed the program.
fn asyncio_scenario(python: &Path, name: &str, env: &[(&str, &str)]) {
    let run = run_holders(python, name, "asyncio", env);
    let pid = pid_of(&run);
    for k in 1..=3 {
        let h = run.read(&format!("gpushim-{pid}-snapshot-{k}.holders.json"));
        assert_eq!(h["walk"]["status"], "complete", "{run}\n{h:#}");
        assert_eq!(
            lines(site(&h, 4 * KIB, &run)),
            [line("path", "programs/holders.py global 'keep' | list[*]", 1, 4 * KIB)]
        );
    }
}

#[test]
fn heap_walk_of_an_asyncio_program() {
    let mut pythons = vec![python3()];
    for py in other_pythons() {
        pythons.push(real_executable(&py).unwrap_or_else(|| panic!("{} does not run", py.display())));
    }
    for py in pythons {
        asyncio_scenario(&py, "holders-asyncio", &[]);
        asyncio_scenario(&py, "holders-asyncio-python", &[("GPUSHIM_HEAP_WALK_NATIVE", "0")]);
    }
}

/// A program with a trace function: it does not run for the walker's code (CPython 3.11 and
/// later; 3.10 has no PyThreadState_EnterTracing).
#[test]
fn heap_walk_runs_no_trace_function_of_the_program() {
    let mut pythons = vec![python3()];
    for py in other_pythons() {
        pythons.push(real_executable(&py).unwrap_or_else(|| panic!("{} does not run", py.display())));
    }
    for py in pythons {
        let run = run_holders(&py, "holders-traced", "traced", &[]);
        let line = run.stdout.lines().find(|l| l.starts_with("walker trace events: ")).unwrap_or_default();
        assert!(line.ends_with(": 0") || line.ends_with(": n/a"), "{line}\n{run}");
        let h = run.read(&format!("gpushim-{}-snapshot-1.holders.json", pid_of(&run)));
        assert_eq!(h["walk"]["status"], "complete", "{run}\n{h:#}");
    }
}

/// A program that replaced `builtins.__import__` and wrapped the functions of gc, itertools,
/// operator, time, marshal, sys and atexit with recording wrappers: none of them is called by
/// the snapshot's walk, the exit walk or the exit walk's registration with atexit (the shim
/// takes the modules from `sys.modules` or the import machinery and the functions from each
/// module's own method table), and both walks still name the holder.
#[test]
fn heap_walk_runs_none_of_the_programs_replacements_of_import_and_module_functions() {
    let mut pythons = vec![python3()];
    for py in other_pythons() {
        pythons.push(real_executable(&py).unwrap_or_else(|| panic!("{} does not run", py.display())));
    }
    for py in pythons {
        let run = run_holders(&py, "holders-replaced", "replaced", &[]);
        assert!(run.stdout.contains("replacements called by the snapshot: []\n"), "{run}");
        assert!(run.stdout.contains("replacements called at exit: []\n"), "{run}");
        let pid = pid_of(&run);
        for f in [format!("gpushim-{pid}-snapshot-1.holders.json"), format!("gpushim-{pid}.holders.json")] {
            let h = run.read(&f);
            assert_eq!(h["walk"]["status"], "complete", "{run}\n{h:#}");
            assert_eq!(
                lines(site(&h, 4 * KIB, &run)),
                [line("path", "programs/holders.py global 'keep' | list[*]", 1, 4 * KIB)],
                "{h:#}"
            );
        }
    }
}

/// A leak held in a global list whose objects free their memory in `__del__`: the exit heap
/// walk runs from `atexit`, then the interpreter's teardown frees everything. The final report
/// still counts the memory live at the walk's start (30 allocations, 1920 KiB), ranks the site
/// as a suspect, says what the teardown freed, and `--fail-on-leak` fails with 3.
#[test]
fn frees_by_the_interpreters_teardown_leave_the_leak_in_the_final_report() {
    let dir = TempDir::new("teardown");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs/teardown.py");
    let out = std::process::Command::new(collector())
        .args(["run", "--fail-on-leak", "--output", dir.path().to_str().unwrap(), "--"])
        .arg(python3())
        .arg(&script)
        .arg(standin("libcudart.so.13"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env_remove("LD_PRELOAD")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(String::from_utf8_lossy(&out.stdout).contains("done"), "{err}");
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("gpushim: leak check failed: 1 leak suspect ("), "{err}");
    assert!(err.contains(": 30 allocations live, 1.9 MiB"), "{err}");
    assert!(
        err.contains(
            "gpushim: 30 allocations (1.9 MiB) were freed only by the interpreter's teardown, after the exit heap walk"
        ),
        "{err}"
    );
    let name = names_in(dir.path())
        .into_iter()
        .find(|n| n.starts_with("gpushim-") && n.ends_with(".json") && !n.contains(".holders"))
        .unwrap_or_else(|| panic!("no report in {}", dir.path().display()));
    let r: Value = serde_json::from_slice(&std::fs::read(dir.path().join(name)).unwrap()).unwrap();
    assert_eq!((total(&r, "live_count"), total(&r, "live_bytes")), (30, 30 * 64 * KIB), "{r:#}");
    let s = &r["suspects"][0];
    assert_eq!(s["live_bytes"], 30 * 64 * KIB, "{r:#}");
    assert!(s["reason"].as_str().unwrap().contains("until the interpreter's teardown freed them"), "{r:#}");
    assert_eq!(r["interpreter_teardown"]["count"], 30, "{r:#}");
    assert_eq!(r["interpreter_teardown"]["bytes"], 30 * 64 * KIB, "{r:#}");
}

/// `gpushim run --output DIR -- python3 tests/programs/SCRIPT LIBC10 MODE`: a program over the
/// stand-in PyTorch (`fake_torch`) and its `libc10_cuda.so`.
fn fake_torch_run(script: &str, mode: &str, dir: &Path) -> std::process::Command {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs").join(script);
    let mut cmd = std::process::Command::new(collector());
    cmd.args(["run", "--output", dir.to_str().unwrap(), "--"])
        .arg(python3())
        .arg(&script)
        .arg(standin("libc10_cuda.so"))
        .arg(mode)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env_remove("LD_PRELOAD");
    cmd
}

/// `torch_blocks.py` in `mode` under `gpushim run`, with `env`: its final report, its holders
/// file, the model's line, line B, line M and the record calls the program saw.
fn torch_blocks(mode: &str, env: &[(&str, &str)]) -> (Value, Value, u64, u64, u64, String) {
    let dir = TempDir::new("torch-blocks");
    let mut cmd = fake_torch_run("torch_blocks.py", mode, dir.path());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let (stdout, err) = (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}{err}");
    // The shim's looks at the allocator (PyTorch's snapshot, whose symbolization of recorded
    // frames imports `torch._inductor`) are made in a copy of the process: the program never
    // imports it because of them.
    assert!(stdout.contains("inductor imported: False"), "{stdout}{err}");
    let done = stdout.lines().find(|l| l.starts_with("done ")).unwrap_or_else(|| panic!("{stdout}{err}"));
    let mut words = done.splitn(5, ' ').skip(1);
    let model_line: u64 = words.next().unwrap().parse().unwrap();
    let b_line: u64 = words.next().unwrap().parse().unwrap();
    let m_line: u64 = words.next().unwrap().parse().unwrap();
    let calls = words.next().unwrap().to_string();
    let names = names_in(dir.path());
    let read = |holders: bool| -> Value {
        let name = names
            .iter()
            .find(|n| n.starts_with("gpushim-") && n.ends_with(".json") && n.contains(".holders") == holders)
            .unwrap_or_else(|| panic!("no report in {}: {names:?}\n{err}", dir.path().display()));
        serde_json::from_slice(&std::fs::read(dir.path().join(name)).unwrap()).unwrap()
    };
    (read(false), read(true), model_line, b_line, m_line, calls)
}

/// The headlines of a report's suspects.
fn headlines(r: &Value) -> Vec<String> {
    r["suspects"].as_array().unwrap().iter().map(|s| s["headline"].as_str().unwrap().to_string()).collect()
}

/// Issue 13, the kept logits: a loop keeps every step's model output in a caching allocator's
/// segments made by another line (line B: the pool reuses a freed block, and the next temporary
/// needs a new segment). The shim turns on PyTorch's record of its blocks' Python stacks (once,
/// after the first allocation through libc10_cuda.so, with `enabled="state", context="alloc",
/// stacks="python"`), the exit walk lists the blocks inside each site's segments, and the one
/// suspect is named by the line the blocks came from: the model's, not line B. With
/// `GPUSHIM_TORCH_STACKS=0` nothing is turned on and the suspect stays at line B; a program
/// that records its own history is left alone. The program never imports `torch._inductor`
/// because of the shim (its stand-in's snapshot asks for it as PyTorch's does).
#[test]
fn suspects_of_a_caching_allocator_are_named_by_the_line_of_the_blocks_inside() {
    let on = [("EXPECT_LOOK", "1")];
    let (r, h, model_line, b_line, _, calls) = torch_blocks("default", &on);
    assert_eq!(calls, "[('state', 'alloc', 'python')]");
    let heads = headlines(&r);
    assert_eq!(heads.len(), 1, "{heads:?}");
    assert_eq!(heads[0], format!("Model.forward (programs/torch_blocks.py:{model_line}) via empty"), "{heads:?}");
    let s = &r["suspects"][0];
    // Line B made 30 segments: 29 of the 30 kept outputs sit in them (the first in the model
    // line's own segment), the last one is free in the pool.
    assert_eq!(s["live_bytes"].as_u64(), Some(30 * MIB), "{s:#}");
    assert!(
        s["reason"].as_str().unwrap().ends_with(
            "named by PyTorch's blocks: 29.0 MiB of the 29.0 MiB in live blocks of its segments were allocated at this line"
        ),
        "{s:#}"
    );
    // The holders file lists the blocks of the site with their stack, innermost first.
    let site = s["site"].as_u64().unwrap();
    let sh = h["sites"].as_array().unwrap().iter().find(|x| x["site"].as_u64() == Some(site)).unwrap();
    let b = &sh["blocks"][0];
    assert_eq!((b["blocks"].as_u64(), b["bytes"].as_u64()), (Some(29), Some(29 * MIB)), "{sh:#}");
    let f: Vec<(String, u64)> = b["frames"]
        .as_array()
        .unwrap()
        .iter()
        .take(3)
        .map(|f| (f["function"].as_str().unwrap().to_string(), f["line"].as_u64().unwrap()))
        .collect();
    assert_eq!(f[0].0, "empty", "{f:?}");
    assert_eq!(f[1], ("forward".to_string(), model_line), "{f:?}");
    assert_eq!(f[2].0, "step", "{f:?}");

    // Off: no record asked for, the suspect named by the call that made the segments.
    let (r, _, _, b_line_off, _, calls) = torch_blocks("default", &[("GPUSHIM_TORCH_STACKS", "0")]);
    assert_eq!(calls, "[]");
    assert_eq!(headlines(&r), [format!("step (programs/torch_blocks.py:{b_line_off}) via empty")]);
    assert_eq!(b_line_off, b_line);

    // The program's own record (a trace of its own): left as the program set it.
    let (_, _, _, _, _, calls) = torch_blocks("own", &on);
    assert_eq!(calls, "[('all', 'all', 'python')]");

    // A look that cannot finish in its copy of the process (killed at its deadline): nothing is
    // turned on, no later look is tried, and the suspect is named by the segments' line.
    let (r, _, _, b_line, _, calls) =
        torch_blocks("default", &[("EXPECT_LOOK", "1"), ("FAKE_SNAPSHOT_HANGS_IN_A_COPY", "1")]);
    assert_eq!(calls, "[]");
    assert_eq!(headlines(&r), [format!("step (programs/torch_blocks.py:{b_line}) via empty")]);
}

/// `torch_copy.py` in `mode` under `gpushim run`, started: the run, and where the copy of the
/// process the shim makes for PyTorch's snapshot writes "COPY PROGRAM" (its pid and the
/// program's) when `hang` (the stand-in's snapshot then never finishes in the copy, as one
/// waiting for a lock another thread held when the copy was made).
fn torch_copy(mode: &str, hang: bool, dir: &TempDir) -> (std::process::Child, std::path::PathBuf) {
    let pid_file = dir.path().join("copy.pid");
    let mut cmd = fake_torch_run("torch_copy.py", mode, dir.path());
    cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
    if hang {
        cmd.env("FAKE_SNAPSHOT_HANGS_IN_A_COPY", "1").env("FAKE_COPY_PID_FILE", &pid_file);
    }
    (cmd.spawn().unwrap(), pid_file)
}

/// The copy's and the program's pids, once the copy has written them (at most 30 s).
fn copy_pids(pid_file: &Path) -> (i32, i32) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        if let Ok(s) = std::fs::read_to_string(pid_file) {
            let v: Vec<i32> = s.split(' ').map(|w| w.parse().unwrap()).collect();
            return (v[0], v[1]);
        }
        assert!(std::time::Instant::now() < deadline, "no copy of the program was made");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// The run's output, or None if it has not ended within `secs`.
fn output_within(child: std::process::Child, secs: u64) -> Option<std::process::Output> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    rx.recv_timeout(std::time::Duration::from_secs(secs)).ok().map(|o| o.unwrap())
}

/// A signal sent to the program's process group while the copy runs (Ctrl-C) runs the
/// program's handlers once, in the program: the copy starts with every signal blocked. Without
/// that, CPython's handler ran in the copy too and wrote the signal's number to the program's
/// wakeup descriptor (asyncio's), which the copy shares: two bytes for one signal.
#[test]
fn a_signal_sent_while_a_copy_runs_reaches_the_programs_handlers_once() {
    let dir = TempDir::new("torch-copy");
    let (child, pid_file) = torch_copy("wakeup", true, &dir);
    let (copy, program) = copy_pids(&pid_file);
    // SAFETY: signals to the two processes the run made.
    unsafe {
        libc::kill(copy, libc::SIGUSR2);
        libc::kill(program, libc::SIGUSR2);
    }
    let out = output_within(child, 60).expect("the run did not end");
    let (stdout, err) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}{err}");
    assert!(stdout.contains("wakeup bytes 1\n"), "{stdout}{err}");
}

/// A copy of the process that crashes (PyTorch's snapshot reading state another thread was
/// changing when the copy was made) leaves no trace of a crash the program did not have: no
/// core file (with the program's core limit unlimited; the copy is not dumpable) and no report
/// of the program's crash handler (Python's faulthandler, which pytest turns on; it ran in the
/// copy and wrote "Fatal Python error: Segmentation fault" and a traceback to the program's
/// stderr). The program goes on.
#[test]
fn a_copy_that_crashes_leaves_no_core_file_and_no_crash_report() {
    use std::os::unix::process::CommandExt;
    let dir = TempDir::new("torch-copy");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs/torch_copy.py");
    let mut cmd = std::process::Command::new(collector());
    cmd.args(["run", "--output", dir.path().to_str().unwrap(), "--"])
        .arg(python3())
        .args(["-X", "faulthandler"])
        .arg(&script)
        .arg(standin("libc10_cuda.so"))
        .arg("crash")
        .current_dir(dir.path())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("FAKE_SNAPSHOT_CRASHES_IN_A_COPY", "1")
        .env_remove("LD_PRELOAD");
    // SAFETY: setrlimit only, between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let unlimited = libc::rlimit { rlim_cur: libc::RLIM_INFINITY, rlim_max: libc::RLIM_INFINITY };
            libc::setrlimit(libc::RLIMIT_CORE, &unlimited);
            Ok(())
        });
    }
    let out = cmd.output().unwrap();
    let (stdout, err) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}{err}");
    assert!(stdout.contains("looked True\n"), "{stdout}{err}");
    assert!(!err.contains("Fatal Python error"), "{err}");
    let cores: Vec<String> = names_in(dir.path()).into_iter().filter(|n| n.starts_with("core")).collect();
    assert!(cores.is_empty(), "{cores:?} {stdout}{err}");
}

/// A Ctrl-C (SIGINT) that arrives while the walk waits for its copy of the process is the
/// program's: it gets its KeyboardInterrupt once the walk is done. The walk catches the
/// interrupt its own code receives and hands it back; before, the hand-back
/// (`_thread.interrupt_main()` called from the walker) raised it again at once inside the
/// walker, which swallowed it, and the program never got it.
#[test]
fn a_ctrl_c_while_a_copy_runs_reaches_the_program() {
    let dir = TempDir::new("torch-copy");
    let (child, pid_file) = torch_copy("interrupt", true, &dir);
    let (_, program) = copy_pids(&pid_file);
    // SAFETY: a signal to the program the run made.
    unsafe { libc::kill(program, libc::SIGINT) };
    let out = output_within(child, 60).expect("the run did not end");
    let (stdout, err) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}{err}");
    assert_eq!(stdout.lines().filter(|l| l.contains("KeyboardInterrupt")).collect::<Vec<_>>(), ["KeyboardInterrupt"]);
}

/// A program killed while a copy of it runs (SIGKILL, the OOM killer) takes the copy with it:
/// the run ends and reports, and no copy is left. Without that, a copy that could not finish
/// ran on forever as an orphan holding the program's descriptors, the collector's connection
/// among them, and `gpushim run` waited for it.
#[test]
fn a_copy_ends_when_the_program_is_killed_while_it_runs() {
    let dir = TempDir::new("torch-copy");
    let (child, pid_file) = torch_copy("kill", true, &dir);
    let (copy, program) = copy_pids(&pid_file);
    // SAFETY: a signal to the program the run made.
    unsafe { libc::kill(program, libc::SIGKILL) };
    let out = output_within(child, 20);
    let stat = std::fs::read_to_string(format!("/proc/{copy}/stat")).unwrap_or_default();
    let copy_left = stat.rsplit_once(") ").is_some_and(|(_, rest)| !rest.starts_with('Z'));
    if copy_left {
        // SAFETY: the copy, left running by the failure this test looks for.
        unsafe { libc::kill(copy, libc::SIGKILL) };
    }
    assert!(!copy_left, "the copy {copy} outlived the program: {stat}");
    let out = out.expect("the run did not end after its program was killed");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("pid {program} (killed)")), "{err}");
}

/// A suspect whose segments are mostly free blocks of PyTorch's caching allocator at exit (by
/// PyTorch's own count, `torch.cuda.memory_snapshot()`'s `allocated_size`), beside a suspect
/// whose segments hold tensors, is the pool growing around memory held elsewhere: line M's
/// scratch tensors of a new size each step make segments that end up free, and only line B's
/// suspect, which holds the kept outputs, is left, with a note for line M's (two suspects
/// before this change). Alone, such a suspect stays: a loop whose list was let go only at the
/// end (`cleared`) keeps its suspect. The rule is for segments whose blocks' lines are not
/// known (`GPUSHIM_TORCH_STACKS=0` here; PyTorch's cudaMallocAsync backend); with them (the
/// default) the one suspect is named by the model's line.
#[test]
fn segments_mostly_free_beside_a_held_leak_are_not_a_suspect_but_alone_they_stay() {
    let off = [("GPUSHIM_TORCH_STACKS", "0")];
    let (r, _, _, b_line, m_line, _) = torch_blocks("pool", &off);
    assert_eq!(headlines(&r), [format!("step (programs/torch_blocks.py:{b_line}) via empty")]);
    let notes: Vec<&str> = r["notes"].as_array().unwrap().iter().map(|n| n.as_str().unwrap()).collect();
    let want = format!(
        "not a suspect: step (programs/torch_blocks.py:{m_line}) via empty, 30.7 MiB in segments of PyTorch's caching \
         allocator of which 0 B were in tensors at exit, beside a suspect whose segments hold tensors (the rest is free \
         memory the allocator keeps for reuse)"
    );
    assert!(notes.contains(&want.as_str()), "{notes:#?}");
    let (r, _, model_line, _, _, _) = torch_blocks("pool", &[]);
    assert_eq!(headlines(&r), [format!("Model.forward (programs/torch_blocks.py:{model_line}) via empty")]);
    let notes: Vec<&str> = r["notes"].as_array().unwrap().iter().map(|n| n.as_str().unwrap()).collect();
    assert!(
        notes.iter().any(|n| n.starts_with(&format!("not a suspect: step (programs/torch_blocks.py:{m_line})"))),
        "{notes:#?}"
    );

    let (r, _, _, b_line, _, _) = torch_blocks("cleared", &off);
    assert_eq!(headlines(&r), [format!("step (programs/torch_blocks.py:{b_line}) via empty")]);
    assert!(!r["notes"].as_array().unwrap().iter().any(|n| n.as_str().unwrap().starts_with("not a suspect")));
}

/// Issue 32, the kinds of memory: one training step over the stand-in caching allocator
/// (tests/programs/torch_kinds.py) holds a parameter, its gradient, AdamW's state for it, an
/// activation only the loss's autograd graph keeps, the loss, and a freed block the pool keeps.
/// The final report gives GPU 0's memory by kind with the bytes of each, which add up to the
/// traced bytes; each tensor kind names the line that allocated it (the program records its
/// blocks' stacks); stderr says it in one line, `gpushim report` in a section, the HTML page
/// carries it, and the holders file has the walk's part.
#[test]
fn device_memory_is_told_by_kind_with_the_lines_of_each() {
    let dir = TempDir::new("torch-kinds");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs/torch_kinds.py");
    let out = std::process::Command::new(collector())
        .args(["run", "--output", dir.path().to_str().unwrap(), "--"])
        .arg(python3())
        .arg(&script)
        .arg(standin("libc10_cuda.so"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env_remove("LD_PRELOAD")
        .output()
        .unwrap();
    let (stdout, err) = (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}{err}");
    let done = stdout.lines().find(|l| l.starts_with("done ")).unwrap_or_else(|| panic!("{stdout}{err}"));
    let lines: Vec<u64> = done.split(' ').skip(1).map(|w| w.parse().unwrap()).collect();
    let [p, g, o, a, l] = lines[..] else { panic!("{done}") };
    let names = names_in(dir.path());
    let report =
        names.iter().find(|n| n.ends_with(".json") && !n.contains(".holders") && !n.contains("-snapshot-")).unwrap();
    let r: Value = serde_json::from_slice(&std::fs::read(dir.path().join(report)).unwrap()).unwrap();
    let d = &r["memory_kinds"][0];
    assert_eq!(d["ordinal"], 0, "{r:#}");
    let kinds: Vec<(&str, u64, u64)> = d["kinds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| (k["kind"].as_str().unwrap(), k["bytes"].as_u64().unwrap(), k["objects"].as_u64().unwrap_or(0)))
        .collect();
    assert_eq!(
        kinds,
        [
            ("parameters", 4 * MIB, 1),
            ("gradients", 4 * MIB, 1),
            ("optimizer_state", 8 * MIB, 2),
            ("activations", 2 * MIB, 1),
            ("other_tensors", MIB, 1),
            ("cached_free", 3 * MIB, 0),
        ],
        "{d:#}"
    );
    // The kinds add up to the traced bytes; the tensor kinds to the tensors'.
    assert_eq!((d["traced_bytes"].as_u64(), d["tensor_bytes"].as_u64()), (Some(22 * MIB), Some(19 * MIB)), "{d:#}");
    assert_eq!(kinds.iter().map(|k| k.1).sum::<u64>(), 22 * MIB);
    assert_eq!(r["gpu_memory"][0]["traced_bytes"].as_u64(), Some(22 * MIB), "{r:#}");
    // Each tensor kind's line: the user frame of its block's stack.
    let line_of = |k: usize| d["kinds"][k]["lines"][0]["line"].as_str().unwrap().to_string();
    for (k, (func, n)) in [("Linear.__init__", p), ("backward", g), ("adamw_step", o), ("forward", a), ("forward", l)]
        .into_iter()
        .enumerate()
    {
        assert_eq!(line_of(k), format!("{func} (programs/torch_kinds.py:{n}) via tensor"), "{d:#}");
    }
    assert_eq!(d["kinds"][2]["lines"][0]["objects"], 2, "{d:#}");
    // One line on stderr.
    let want = "gpushim: GPU 0 by kind of memory: parameters 4.0 MiB, gradients 4.0 MiB, optimizer state 8.0 MiB, \
                activations saved by autograd 2.0 MiB, other tensors and arrays 1.0 MiB, cached free 3.0 MiB";
    // At the snapshot's walk (the same memory) and at exit.
    assert_eq!(err.lines().filter(|x| *x == want).count(), 2, "{err}");
    // The holders file has the walk's part: the same tensor kinds.
    let holders = names.iter().find(|n| n.ends_with(".holders.json") && !n.contains("-snapshot-")).unwrap();
    let h: Value = serde_json::from_slice(&std::fs::read(dir.path().join(holders)).unwrap()).unwrap();
    assert_eq!(h["kinds"][0]["kinds"][2]["bytes"].as_u64(), Some(8 * MIB), "{h:#}");
    // The text report's section, and the HTML page's data.
    let path = dir.path().join(report);
    let show = |args: &[&str]| {
        let mut a = vec!["report".as_ref(), path.as_os_str()];
        a.extend(args.iter().map(std::ffi::OsStr::new));
        let out = gpushim(a);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let text = show(&[]);
    assert!(
        text.contains(
            "GPU 0 by kind of memory (the heap walk's objects: tensors and arrays 19.0 MiB of 22.0 MiB traced):"
        ),
        "{text}"
    );
    let opt_line = format!("         8.0 MiB  adamw_step (programs/torch_kinds.py:{o}) via tensor (2 objects)");
    assert!(text.lines().any(|x| x == opt_line), "{text}");
    let html = show(&["--format", "html"]);
    // A snapshot's report was written before its walk: `gpushim report` takes the kinds from
    // its holders file.
    let snap = names.iter().find(|n| n.ends_with("-snapshot-1.json")).unwrap();
    let snap = gpushim(["report".as_ref(), dir.path().join(snap).as_os_str()]);
    let snap = String::from_utf8_lossy(&snap.stdout);
    assert!(snap.contains("  optimizer state                     8.0 MiB in 2 objects"), "{snap}");
    assert!(
        html.contains("\"memory_kinds\":[{\"kinds\":[{\"bytes\":4194304,\"kind\":\"parameters\""),
        "the page's data has the kinds"
    );
}

/// A script that allocates in a method (the location), keeps buffers in a global (a global
/// holder) and one in a local of `main` (a local holder), then takes a snapshot and waits for
/// its heap walk, from inside `main`.
const ONE_FILE: &str = r#"import ctypes
import sys

import gpushim

cudart = ctypes.CDLL(sys.argv[1])


class Buf:
    def __init__(self, n):
        p = ctypes.c_void_p()
        if cudart.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(n)) != 0:
            raise SystemExit("cudaMalloc failed")
        self.__cuda_array_interface__ = {"data": (p.value, False), "shape": (n,), "typestr": "|u1", "version": 3}


T = [Buf(4096) for _ in range(3)]


def main():
    model = Buf(65536)
    snap = gpushim.snapshot("one", timeout=20)
    print("holders", gpushim.holders_path(snap, timeout=20), flush=True)
    return model


main()
"#;

/// Every name of a file that ends in `name` in `text`: the run of characters before it back to
/// a space, a quote, a bracket or a line's start.
fn names_of(text: &str, name: &str) -> Vec<String> {
    text.match_indices(name)
        .map(|(i, _)| {
            let start = text[..i].rfind(|c: char| c.is_whitespace() || "\"'([".contains(c)).map_or(0, |j| j + 1);
            text[start..i + name.len()].to_string()
        })
        .collect()
}

/// One Python file is named one way, `proj/one_file.py`, in the locations, the global holders
/// and the local holders of the report's text, JSON and holders file, whether the program was
/// started by its absolute path or as `python3 ../one_file.py` from a subdirectory (CPython's
/// `co_filename` is then `…/proj/sub/../one_file.py`).
#[test]
fn one_file_has_one_name_however_the_program_was_started() {
    let mut seen = Vec::new();
    for how in ["absolute", "relative"] {
        let t = Target::new(python3(), &format!("holders-one-file-{how}"));
        let proj = t.dir.path().join("proj");
        let sub = proj.join("sub");
        std::fs::create_dir_all(&sub).unwrap();
        let script = proj.join("one_file.py");
        std::fs::write(&script, ONE_FILE).unwrap();
        // The path the working directory reads by (getcwd gives it without symbolic links).
        let script = std::fs::canonicalize(&script).unwrap();
        let arg = if how == "absolute" { script.display().to_string() } else { "../one_file.py".to_string() };
        let cudart = standin("libcudart.so.13");
        let t = t
            .args(&[&arg, cudart.to_str().unwrap()])
            .env("PYTHONPATH", crate::pyapi::package_dir().display())
            .env("PYTHONDONTWRITEBYTECODE", "1");
        let out = t.command().current_dir(&sub).stdin(std::process::Stdio::null()).output().unwrap();
        let run = Outcome {
            desc: format!("(in {}) {}", sub.display(), t.describe()),
            status: out.status,
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            dir: t.dir,
        };
        run.success();
        let pid = pid_of(&run);
        let holders_file = run.dir.path().join(format!("gpushim-{pid}-snapshot-1-one.holders.json"));
        assert_eq!(
            run.stdout.lines().find_map(|l| l.strip_prefix("holders ")),
            Some(holders_file.to_str().unwrap()),
            "{run}"
        );
        let snapshot = run.dir.path().join(format!("gpushim-{pid}-snapshot-1-one.json"));
        let text = gpushim(["report".as_ref(), snapshot.as_os_str()]);
        assert!(text.status.success(), "{text:?}");
        let text = String::from_utf8_lossy(&text.stdout).into_owned();
        let holders = std::fs::read_to_string(&holders_file).unwrap();
        let h: Value = serde_json::from_str(&holders).unwrap();
        let paths: Vec<String> = h["sites"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|s| s["holders"].as_array().unwrap().iter())
            .map(|l| l["path"][0].as_str().unwrap().to_string())
            .collect();
        assert!(paths.contains(&"proj/one_file.py global 'T'".to_string()), "{how}: {paths:?}{run}");
        assert!(
            paths.iter().any(|p| p.starts_with("function 'main' (proj/one_file.py:") && p.contains(") local 'model'")),
            "{how}: {paths:?}{run}"
        );
        assert!(text.contains("Buf.__init__ (proj/one_file.py:"), "{how}:\n{text}{run}");
        assert!(text.contains("held by: proj/one_file.py global 'T'"), "{how}:\n{text}{run}");
        // The text's first line is the command line, as given.
        let (command, names) = text.split_once('\n').unwrap();
        assert!(command.contains(&format!(" {arg} ")), "{command}");
        for (what, body) in [("text", names), ("holders", &holders)] {
            let names = names_of(body, "one_file.py");
            assert!(!names.is_empty(), "{how} {what}:\n{body}");
            assert!(names.iter().all(|n| n == "proj/one_file.py"), "{how} {what}: {names:?}\n{body}");
        }
        // The JSON report keeps the file's whole path, made absolute and without `..`.
        let report = read_json(&snapshot, &run);
        let files: std::collections::BTreeSet<String> = report["sites"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|s| s["frames"].as_array().unwrap().iter())
            .filter_map(|f| f["file"].as_str().filter(|f| f.ends_with("one_file.py")).map(String::from))
            .collect();
        assert_eq!(files.into_iter().collect::<Vec<_>>(), [script.display().to_string()], "{how}{run}");
        seen.push(paths);
    }
    assert_eq!(seen[0], seen[1], "the same holders, by the same names");
}
