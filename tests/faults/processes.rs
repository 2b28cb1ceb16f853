//! Processes and libraries: children forked and exec'd, a program reaping every child, forks while
//! the shim starts, CUDA libraries unloaded and reloaded, overflowing arguments, `pthread_cancel`,
//! descriptors closed and reused, and quick exits.

use crate::util::*;

#[test]
fn fork_exec_of_non_cuda_tools_leaves_them_untouched() {
    // After tracing has started: a shell and an nvidia-smi-like tool (asks the runtime about
    // the device, allocates nothing) inherit LD_PRELOAD. Each prints its own thread count.
    let plain = plain_stdout("target_dynamic", &["forkexec-tools"]);
    assert!(plain.contains(&"Threads:\t1".to_string()) && plain.contains(&"query threads 1".to_string()), "{plain:?}");
    let t = Target::new("target_dynamic", "forkexec-tools").args(&["forkexec-tools"]);
    let d = run_bounded(&t);
    assert!(d.status.success(), "{d}");
    assert_eq!(d.stdout, plain, "no writer thread in the children, same output{d}");
    let pid = d.pid();
    assert!(d.stderr.lines().all(|l| l.starts_with("gpushim: ")), "{d}");
    let summaries = d.stderr.lines().filter(|l| l.starts_with("gpushim: pid ") && l.contains(" (exit): ")).count();
    assert_eq!(summaries, 1, "only the parent's summary{d}");
    assert_eq!(names_in(t.dir.path()), [format!("gpushim-{pid}.json")], "only the parent's report{d}");
    let r = d.report_in(t.dir.path());
    assert_eq!(total(&r, "live_bytes"), MIB, "{d}");
    assert_eq!(sites_with(&r, "tools_parent_alloc").len(), 1, "{d}");
}

#[test]
fn a_program_that_reaps_every_child_does_not_see_or_wait_for_the_collector() {
    let plain = plain_stdout("target_dynamic", &["reap"]);
    let t = Target::new("target_dynamic", "reap").args(&["reap"]);
    let d = run_bounded(&t);
    assert!(d.status.success(), "{d}");
    assert_eq!(d.stdout, plain, "{d}");
    let r = d.report_in(t.dir.path());
    assert_eq!(r["reason"], "exit", "{d}");
    assert_eq!(total(&r, "live_bytes"), MIB, "{d}");
}

/// A fork while other threads start the shim (module scans hold the loader's write lock,
/// which glibc does not reset in the child) must not leave the child hung. The race hit 7 of
/// 40 runs before the fix; 10 runs here.
#[test]
fn fork_while_threads_start_the_shim_never_hangs_the_child() {
    for i in 0..10 {
        let t = Target::new("target_dynamic", &format!("fork-start-{i}")).args(&["fork-start"]);
        let d = run_bounded(&t);
        assert!(d.status.success(), "run {i}{d}");
        assert!(d.stdout.iter().any(|l| l == "bad children 0"), "run {i}{d}");
    }
}

#[test]
fn cuda_library_unloaded_and_reloaded_at_run_time_and_rtld_default_next_lookups() {
    let plain = plain_stdout("target_dynamic", &["dlreload"]);
    let t = Target::new("target_dynamic", "dlreload").args(&["dlreload"]);
    let d = run_bounded(&t);
    assert!(d.status.success(), "{d}");
    assert_eq!(d.stdout, plain, "{d}");
    let r = d.report_in(t.dir.path());
    assert_eq!(total(&r, "alloc_count"), 4, "{d}");
    assert_eq!(total(&r, "live_bytes"), 30 * MIB, "{d}");
    assert_eq!(total(&r, "unknown_free_count"), 2, "{d}");
    for (func, api, bytes) in [
        ("dl_second_alloc", "cuMemAlloc", 2 * MIB),
        ("dl_default_alloc", "cudaMalloc", 4 * MIB),
        ("dl_next_alloc", "cudaMalloc", 8 * MIB),
        ("dl_default_driver_alloc", "cuMemAlloc", 16 * MIB),
    ] {
        let s = the_site(&r, func, &d);
        assert_eq!(s["live_bytes"].as_u64(), Some(bytes), "{func}{d}");
        assert_eq!(s["apis"], serde_json::json!([api]), "{func}{d}");
    }
}

#[test]
fn arguments_that_overflow_and_frames_without_unwind_info_pass_through() {
    // cudaMallocPitch(2^40, 2^40): the size overflows; the runtime's error comes back.
    let plain = plain_stdout("target_dynamic", &["pitch-overflow"]);
    let t = Target::new("target_dynamic", "pitch").args(&["pitch-overflow"]);
    let d = run_bounded(&t);
    assert!(d.status.success(), "{d}");
    assert_eq!(d.stdout, plain, "{d}");
    assert!(!d.stderr.contains("panicked"), "{d}");
    let r = d.report_in(t.dir.path());
    assert_eq!(total(&r, "failed_count"), 1, "{d}");
    assert_eq!(r["failures"][0]["size"].as_u64(), Some(u64::MAX), "the size saturates{d}");
    // cudaMalloc called from a frame without CFI whose rbp is -8: the backtrace stops there
    // and the allocation is recorded.
    let plain = plain_stdout("target_dynamic", &["odd-rbp"]);
    let t = Target::new("target_dynamic", "odd-rbp").args(&["odd-rbp"]);
    let d = run_bounded(&t);
    assert!(d.status.success(), "{d}");
    assert_eq!(d.stdout, plain, "{d}");
    assert!(!d.stderr.contains("panicked"), "{d}");
    let r = d.report_in(t.dir.path());
    assert_eq!((total(&r, "alloc_count"), total(&r, "live_bytes")), (1, MIB), "{d}");
}

/// `pthread_cancel` of a thread in its first allocations: the program behaves as without the
/// shim (the thread is cancelled, the program goes on).
#[test]
fn pthread_cancel_of_an_allocating_thread_is_harmless() {
    for us in ["0", "50", "1000"] {
        let t = Target::new("target_dynamic", &format!("cancel-{us}")).args(&["cancel", us]);
        let d = run_bounded(&t);
        assert!(d.status.success(), "cancel after {us} µs{d}");
        assert_eq!(d.stdout, ["cancelled 1", "ok"], "{d}");
    }
}

/// A program that closes every descriptor (as daemons do) and reuses the numbers: the shim
/// never writes to, shuts down or closes the program's new descriptors; it stops recording
/// with one line.
#[test]
fn descriptors_closed_and_reused_by_the_program_are_left_alone() {
    let t = Target::new("target_dynamic", "close-fds");
    let prefix = t.dir.path().join("program-file");
    let t = t.args(&["close-fds", prefix.to_str().unwrap()]);
    let d = run_bounded(&t);
    assert!(d.status.success(), "{d}");
    assert!(d.stdout.iter().any(|l| l == "failed writes 0"), "{d}");
    for i in 0..8 {
        let f = format!("{}.{i}", prefix.display());
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "data\n", "{f} holds only the program's own write{d}");
    }
}

/// `_exit`, `_Exit` and `quick_exit` run no atexit handler; the shim still ends the stream
/// cleanly, so nothing recorded is lost and the reason is `exit`.
#[test]
fn quick_ends_keep_every_event() {
    for how in ["_exit", "_Exit", "quick_exit"] {
        let t = Target::new("target_dynamic", &format!("quick-{how}")).args(&["quick-end", how]);
        let d = run_bounded(&t);
        assert_eq!(d.status.code(), Some(5), "{how}{d}");
        let r = d.report_in(t.dir.path());
        assert_eq!(total(&r, "alloc_count"), 100, "{how}{d}");
        assert_eq!(r["reason"], "exit", "{how}{d}");
    }
}

/// A program that closes every inherited descriptor with `close_range(3, ~0U, 0)` and runs
/// on: its report said `killed` ("0 allocations live") for a program that exited 0. The
/// collector sees the program still running at the end of its stream: `disconnected`.
#[test]
fn close_range_of_the_shims_socket_is_reported_as_disconnected_not_killed() {
    let t = Target::new("target_dynamic", "close-range").args(&["close-range"]);
    let mut live = Live::start(&t);
    assert_eq!(live.line(), "closed");
    // The collector writes its report at the end of the stream, while the program still waits
    // for stdin: once it is there, the program may end.
    let report = t.dir.path().join(format!("gpushim-{}.json", live.pid));
    let deadline = std::time::Instant::now() + DEADLINE;
    while !report.exists() {
        if std::time::Instant::now() > deadline {
            live.abort("no report while the program ran on after closing the socket");
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let d = live.finish();
    assert!(d.status.success(), "{d}");
    assert_eq!(d.stdout, ["closed", "ok"], "{d}");
    let r = d.report_in(t.dir.path());
    assert_eq!(r["reason"], "disconnected", "{d}");
    assert!(total(&r, "alloc_count") <= 4, "{d}");
    assert!(r["notes"].to_string().contains("closed the shim's socket and ran on"), "{d}");
    assert!(d.stderr.contains(" (disconnected): "), "{d}");
}

/// A child subreaper (supervisors, systemd user services) that reaps with `wait()` until
/// ECHILD: the collector, orphaned by its intermediate, came back to the program as its child,
/// and the wait hung until the program's own timeout (here `alarm(20)`: SIGALRM).
#[test]
fn a_subreaper_that_reaps_every_child_does_not_wait_for_the_collector() {
    let t = Target::new("target_dynamic", "reap-subreaper").args(&["subreaper-reap"]);
    let d = run_bounded(&t);
    assert!(d.status.success(), "{d}");
    assert_eq!(d.stdout, ["reaped 1 others 0", "ok"], "{d}");
    let r = d.report_in(t.dir.path());
    assert_eq!((r["reason"].as_str(), total(&r, "live_bytes")), (Some("exit"), MIB), "{d}");
}

#[test]
fn forked_children_start_a_collector_each_only_when_they_allocate() {
    // Each traced process has a collector of its own: a child that allocates starts one at its
    // first CUDA call; a child that makes none (a DataLoader worker, a helper process) starts
    // none. The collectors are counted by a wrapper of the collector that notes each start.
    // What they cost: scripts/bench-forks.sh, docs/performance.md ("Forked children").
    let t = Target::new("hostile", "fork-many").args(&["fork-many"]);
    let started = t.dir.path().join("started");
    let wrapper = t.dir.path().join("collector.sh");
    std::fs::write(
        &wrapper,
        format!("#!/bin/sh\necho $$ >> '{}'\nexec '{}' \"$@\"\n", started.display(), collector().display()),
    )
    .unwrap();
    std::fs::set_permissions(&wrapper, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let t = t.env("GPUSHIM_COLLECTOR", wrapper.display());
    let d = run_bounded(&t);
    assert!(d.status.success(), "{d}");
    let reports = || -> Vec<String> {
        names_in(t.dir.path())
            .into_iter()
            .filter(|n| {
                n.starts_with("gpushim-") && n.ends_with(".json") && !n.contains(".holders") && !n.contains(".reach")
            })
            .collect()
    };
    // The children's collectors write after their children ended: waited for, with a deadline.
    let deadline = std::time::Instant::now() + DEADLINE;
    while reports().len() < 11 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let starts = std::fs::read_to_string(&started).unwrap_or_default().lines().count();
    assert_eq!(starts, 11, "the parent and the 10 children that allocate{d}");
    let got = reports();
    assert_eq!(got.len(), 11, "{got:?}{d}");
    let live: Vec<u64> = got.iter().map(|n| total(&read_json(&t.dir.path().join(n), &d), "live_bytes")).collect();
    assert_eq!(live.iter().filter(|&&b| b == 4 << 10).count(), 10, "{live:?}{d}");
    assert_eq!(live.iter().filter(|&&b| b == MIB).count(), 1, "{live:?}{d}");
}
