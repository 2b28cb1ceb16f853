//! The shim's per-thread rings (issue 18, shim/src/ring.rs): many threads with exact totals and
//! per-thread counts, threads that end right after allocating, snapshots while threads
//! allocate, a fork while threads allocate (tests/programs/target_rings.c).

use std::collections::BTreeMap;

use serde_json::Value;

use crate::util::*;

/// Per thread name, (allocations, bytes) of the sites whose frames include `function`.
fn per_thread(r: &Value, function: &str) -> BTreeMap<String, (u64, u64)> {
    let mut m = BTreeMap::new();
    for s in sites_with(r, function) {
        for t in s["threads"].as_array().unwrap() {
            let e = m.entry(t["name"].as_str().unwrap().to_string()).or_insert((0, 0));
            e.0 += t["alloc_count"].as_u64().unwrap();
            e.1 += t["alloc_bytes"].as_u64().unwrap();
        }
    }
    m
}

#[test]
fn sixteen_threads_give_exact_totals_and_per_thread_counts() {
    // Thread i makes (i + 1) × 2,000 pairs (up to 32,000: 64,000 events, 15 rings' worth) and keeps i + 1
    // blocks of 8 KiB, with backtraces on and off.
    const N: u64 = 16;
    const M: u64 = 2000;
    for bt in ["1", "0"] {
        let t = Target::new("target_dynamic", &format!("ring-threads-{bt}"))
            .args(&["ring-threads", &N.to_string(), &M.to_string()])
            .env("GPUSHIM_BACKTRACE", bt);
        let d = run_bounded(&t);
        assert!(d.status.success(), "{d}");
        let r = d.report_in(t.dir.path());
        let pairs: u64 = (1..=N).map(|i| i * M).sum();
        let kept: u64 = (1..=N).sum();
        assert_eq!(total(&r, "alloc_count"), pairs + kept, "backtraces {bt}{d}");
        assert_eq!(total(&r, "free_count"), pairs, "backtraces {bt}{d}");
        assert_eq!(total(&r, "live_count"), kept, "backtraces {bt}{d}");
        assert_eq!(total(&r, "live_bytes"), kept * 8192, "backtraces {bt}{d}");
        assert_eq!(total(&r, "unknown_free_count"), 0, "backtraces {bt}{d}");
        assert_eq!(total(&r, "replaced_count"), 0, "backtraces {bt}{d}");
        assert_eq!(total(&r, "lost_events"), 0, "backtraces {bt}{d}");
        if bt == "0" {
            continue;
        }
        // Every thread's allocations under its own name, at the right site: a stack taken as
        // "the same as the thread's previous one" from another thread would move them.
        let pairs_by = per_thread(&r, "ring_pair");
        let kept_by = per_thread(&r, "ring_keep");
        for i in 0..N {
            let name = format!("ring-{i}");
            assert_eq!(pairs_by.get(&name), Some(&((i + 1) * M, (i + 1) * M * 4096)), "{name}{d}");
            assert_eq!(kept_by.get(&name), Some(&(i + 1, (i + 1) * 8192)), "{name}{d}");
        }
        assert_eq!(pairs_by.len() as u64, N, "{pairs_by:?}{d}");
        assert_eq!(sites_with(&r, "ring_keep").len(), 1, "one site for the kept blocks{d}");
    }
}

#[test]
fn threads_that_end_right_after_allocating_lose_no_events() {
    // 32 threads make 2,500 pairs each (5,000 events, more than a ring holds), keep 10 blocks and
    // end; the main thread exits as soon as the last has allocated: their rings are drained
    // before the stream's end.
    for run in 0..3 {
        let t = Target::new("target_dynamic", &format!("ring-exit-{run}")).args(&["ring-exit", "32", "2500"]);
        let d = run_bounded(&t);
        assert!(d.status.success(), "{d}");
        let r = d.report_in(t.dir.path());
        assert_eq!(total(&r, "alloc_count"), 32 * (2500 + 10), "run {run}{d}");
        assert_eq!(total(&r, "free_count"), 32 * 2500, "run {run}{d}");
        assert_eq!(total(&r, "live_bytes"), 32 * 10 * 8192, "run {run}{d}");
        assert_eq!(total(&r, "lost_events"), 0, "run {run}{d}");
    }
}

#[test]
fn snapshots_taken_while_sixteen_threads_allocate_hold_a_consistent_prefix() {
    // 16 threads keep 600 blocks each (no frees) while SIGUSR1 comes every millisecond: each
    // snapshot holds exactly the events numbered below its boundary (no note that the marker
    // came late), each thread's count only grows from one snapshot to the next.
    const N: u64 = 16;
    const K: u64 = 600;
    let t = Target::new("target_dynamic", "ring-snap").args(&["ring-snap", &N.to_string(), &K.to_string()]);
    let d = run_bounded(&t);
    assert!(d.status.success(), "{d}");
    let asked: u64 =
        d.stdout[0].strip_prefix("snapshots ").and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("{d}"));
    let pid = d.pid();
    let fin = d.report_in(t.dir.path());
    assert_eq!(total(&fin, "live_count"), N * K + 1, "{d}");
    let mut last: BTreeMap<String, u64> = BTreeMap::new();
    let mut n = 0;
    while let Ok(text) = std::fs::read_to_string(t.dir.path().join(format!("gpushim-{pid}-snapshot-{}.json", n + 1))) {
        n += 1;
        let s: Value = serde_json::from_str(&text).unwrap();
        let count = total(&s, "live_count");
        assert_eq!(total(&s, "live_bytes"), 8192 * count, "snapshot {n}{d}");
        assert_eq!(total(&s, "lost_events"), 0, "snapshot {n}{d}");
        assert_eq!(s["notes"], serde_json::json!([]), "snapshot {n}: the boundary was honoured{d}");
        let by = per_thread(&s, "ring_keep");
        assert_eq!(by.values().map(|v| v.0).sum::<u64>(), count, "snapshot {n}{d}");
        for (name, &(c, _)) in &by {
            let before = last.get(name).copied().unwrap_or(0);
            assert!(c >= before, "snapshot {n}: {name} has {c} after {before}{d}");
            last.insert(name.clone(), c);
        }
    }
    assert!(n >= 1 && n as u64 <= asked, "{n} snapshots of {asked}{d}");
}

#[test]
fn a_child_forked_while_threads_allocate_reports_only_its_own_events() {
    // The forking thread had just made 500 pairs (some still in its ring at the fork); the
    // child makes 3,000 pairs and keeps 8 KiB: its report has exactly those.
    for run in 0..3 {
        let t = Target::new("target_dynamic", &format!("ring-fork-{run}")).args(&["ring-fork", "8"]);
        let d = run_bounded(&t);
        assert!(d.status.success(), "{d}");
        assert!(d.stdout.contains(&"child status 0".to_string()), "{d}");
        let reports: Vec<Value> = names_in(t.dir.path())
            .into_iter()
            .filter(|f| f.ends_with(".json") && !f.ends_with(".reach.json"))
            .map(|f| read_json(&t.dir.path().join(f), &d))
            .collect();
        assert_eq!(reports.len(), 2, "{d}");
        let child = reports.iter().find(|r| total(r, "live_bytes") == 8192).unwrap_or_else(|| panic!("{d}"));
        assert_eq!(total(child, "alloc_count"), 3001, "run {run}{d}");
        assert_eq!(total(child, "free_count"), 3000, "run {run}{d}");
        assert_eq!(total(child, "unknown_free_count"), 0, "run {run}{d}");
        assert_eq!(total(child, "lost_events"), 0, "run {run}{d}");
        let parent = reports.iter().find(|r| total(r, "live_bytes") == 0).unwrap_or_else(|| panic!("{d}"));
        assert_eq!(total(parent, "alloc_count"), total(parent, "free_count"), "run {run}{d}");
        assert_eq!(total(parent, "unknown_free_count"), 0, "run {run}{d}");
    }
}

#[test]
fn the_exit_walk_comes_before_the_teardown_frees_of_its_thread() {
    // examples/leak.py keeps 200 buffers of 1 MiB in a global list; the exit heap walk runs from
    // atexit, then the interpreter's teardown frees them all on the same thread. The walk's event
    // must reach the collector before those frees (it tells teardown frees by it): it goes
    // through the thread's ring too. Through the channel, the writer took the ring's frees first
    // and the report had nothing live (4 runs of 4, and test-wheel.sh).
    for run in 0..3 {
        let dir = TempDir::new(&format!("ring-teardown-{run}"));
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/leak.py");
        let out = std::process::Command::new(collector())
            .args(["run", "--output", dir.path().to_str().unwrap(), "--"])
            .arg(crate::python::python3())
            .arg(&script)
            .arg("200")
            .env("GPUSHIM_EXAMPLE_CUDART", standin("libcudart.so.13"))
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env_remove("LD_PRELOAD")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "run {run}: {err}");
        assert!(err.contains("(exit): 200 allocations live, 200.0 MiB"), "run {run}: {err}");
        assert!(
            err.contains("200 live (200.0 MiB) until the interpreter's teardown freed them, the program freed none; allocated at render"),
            "run {run}: {err}"
        );
    }
}
