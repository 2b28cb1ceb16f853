//! Threads and signals: 64 threads with exact totals, a burst of SIGUSR1, SIGINT to the process
//! group.

use std::fs;
use std::os::unix::process::{CommandExt, ExitStatusExt};

use serde_json::Value;

use crate::util::*;

/// Threads × pairs of the exact-totals test: 64 × 100,000 (12.8 million events). The dev
/// profile optimizes the collector (Cargo.toml), which makes this about 30 s on 2 cores; with
/// an unoptimized collector (about 150,000 events a second) it took about 90 s.
const THREADS: u64 = 64;
const PAIRS_PER_THREAD: u64 = 100_000;

#[test]
fn sixty_four_threads_give_exact_totals_without_deadlock() {
    let t = Target::new("target_dynamic", "threads64").args(&[
        "threads",
        &THREADS.to_string(),
        &PAIRS_PER_THREAD.to_string(),
    ]);
    let d = run_bounded(&t);
    assert!(d.status.success(), "{d}");
    let r = d.report_in(t.dir.path());
    let n = THREADS * PAIRS_PER_THREAD;
    assert_eq!(total(&r, "alloc_count"), n, "{d}");
    assert_eq!(total(&r, "free_count"), n, "{d}");
    assert_eq!(total(&r, "live_bytes"), 0, "{d}");
    assert_eq!(total(&r, "unknown_free_count"), 0, "{d}");
    assert_eq!(total(&r, "replaced_count"), 0, "{d}");
    assert_eq!(total(&r, "lost_events"), 0, "{d}");
    assert!(total(&r, "peak_live_bytes") <= THREADS * 4096, "{d}");
}

#[test]
fn a_burst_of_1000_sigusr1_gives_coherent_snapshots() {
    let t = Target::new("target_dynamic", "burst").args(&["burst", "1000"]);
    let d = run_bounded(&t);
    assert!(d.status.success(), "{d}");
    let k: u64 = d.stdout[0].strip_prefix("allocs ").and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("{d}"));
    assert_eq!(d.stdout[1], "ok", "{d}");
    let pid = d.pid();
    let fin = d.report_in(t.dir.path());
    assert_eq!((total(&fin, "live_count"), total(&fin, "live_bytes")), (k, 4096 * k), "{d}");
    // Requests faster than the writer's tick coalesce: at least one snapshot, at most one per
    // signal; each holds a prefix of the allocations (the program only allocates), so counts
    // never decrease from one snapshot to the next.
    let mut n = 0;
    let mut last = 0;
    while let Ok(text) = fs::read_to_string(t.dir.path().join(format!("gpushim-{pid}-snapshot-{}.json", n + 1))) {
        n += 1;
        let s: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(s["reason"], "snapshot", "{d}");
        let (count, bytes) = (total(&s, "live_count"), total(&s, "live_bytes"));
        assert_eq!(bytes, 4096 * count, "snapshot {n}{d}");
        assert_eq!(total(&s, "alloc_count"), count, "snapshot {n}: no frees{d}");
        assert!(count >= last && count <= k, "snapshot {n}: {count} after {last}, of {k}{d}");
        assert_eq!(total(&s, "lost_events"), 0, "snapshot {n}{d}");
        assert_eq!(s["notes"], serde_json::json!([]), "snapshot {n}: the boundary was honoured{d}");
        last = count;
    }
    assert!((1..=1000).contains(&n), "{n} snapshots{d}");
    // Besides each snapshot, its reachability scan's companion file (`*.reach.json`).
    let reports = names_in(t.dir.path()).into_iter().filter(|f| !f.ends_with(".reach.json")).count();
    assert_eq!(reports, n + 1, "{d}");
}

#[test]
fn sigint_to_the_process_group_still_writes_the_report_with_its_reason() {
    // Ctrl-C in a terminal: SIGINT to the whole foreground group. The collector has its own.
    // The program's exit status says it was stopped when the collector reads it from its zombie
    // before the parent (here the test's waiting thread, at once) reaps it, else it was
    // "killed"; under `gpushim run`, which reaps after its collector, it is always "stopped"
    // (schedulers::a_ctrl_c_that_ends_the_program_under_gpushim_run_leaves_a_report_that_says_stopped).
    for (scenario, reason) in [("pause", "stopped"), ("sigint-exit", "exit")] {
        let t = Target::new("target_dynamic", "sigint").args(&[scenario, "0"]);
        let mut cmd = t.command();
        cmd.process_group(0);
        let mut live = Live::spawn(cmd, format!("(own process group) {}", t.describe()));
        assert_eq!(live.line(), "ready");
        let pid = live.pid;
        if reason == "stopped" {
            // A program killed by a signal loses the events still queued in the shim (the
            // writer sleeps up to 20 ms when idle); a snapshot makes sure the collector has
            // them all before the signal.
            take_snapshot(pid);
        }
        signal(-pid, libc::SIGINT);
        let d = live.finish();
        if reason == "stopped" {
            assert_eq!(d.status.signal(), Some(libc::SIGINT), "no handler: SIGINT ends it{d}");
        } else {
            assert_eq!(d.status.code(), Some(130), "{d}");
            assert_eq!(d.stdout, ["ready", "interrupted 1"], "{d}");
        }
        let r = read_json(&t.dir.path().join(format!("gpushim-{pid}.json")), &d);
        if reason == "stopped" {
            match r["reason"].as_str() {
                Some("stopped") => assert_eq!(r["signal"], "SIGINT", "{d}"),
                other => assert_eq!(other, Some("killed"), "{d}"),
            }
        } else {
            assert_eq!(r["reason"], reason, "{d}");
        }
        assert_eq!(total(&r, "live_bytes"), MIB, "{d}");
        assert_eq!(sites_with(&r, "pause_before").len(), 1, "{d}");
    }
}
