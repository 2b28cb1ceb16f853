//! The target's life: normal exit, SIGKILL, fork without exec, fork+exec of non-CUDA programs,
//! processes that never touch CUDA, and a collector that cannot be started.

use std::os::unix::process::ExitStatusExt;

use crate::util::*;

#[test]
fn killed_target_still_gets_a_report_with_reason_killed() {
    let t = Target::new("target_dynamic", "kill").args(&["sleep-snapshot"]);
    let mut live = Live::start(&t);
    assert_eq!(live.line(), "ready");
    let pid = live.pid;
    // A snapshot proves the collector holds every event so far; then SIGKILL, no exit path.
    take_snapshot(pid);
    signal(pid, libc::SIGKILL);
    let status = live.wait_exit();
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    // The collector shares the target's stderr: its end means the report is written.
    let d = live.finish_after(status);
    let r = read_json(&t.dir.path().join(format!("gpushim-{pid}.json")), &d);
    assert_eq!(r["reason"], "killed", "{d}");
    assert_eq!(total(&r, "live_bytes"), MIB, "{d}");
    assert_eq!(sites_with(&r, "sleeper_before").len(), 1, "{d}");
    assert!(d.stderr.contains("(killed)"), "the summary says how the program ended{d}");
}

#[test]
fn fork_without_exec_gives_each_process_its_own_report() {
    let run = Target::new("target_dynamic", "fork").args(&["fork"]).run();
    run.success();
    let reports = run.reports();
    assert_eq!(reports.len(), 2, "{run}");
    let parent = reports.values().find(|r| sites_with(r, "fork_parent_after").len() == 1).expect("parent report");
    let child = reports.values().find(|r| sites_with(r, "fork_child_first").len() == 1).expect("child report");
    assert_eq!(total(parent, "live_bytes"), 5 * MIB, "{run}");
    assert_eq!(total(parent, "alloc_count"), 2, "{run}");
    assert_eq!(total(child, "live_bytes"), 5 * MIB, "{run}");
    assert_eq!(total(child, "alloc_count"), 2, "the child's report holds only its own allocations{run}");
    assert!(sites_with(child, "fork_parent_before").is_empty(), "{run}");
    assert_eq!(parent["reason"], "exit");
    assert_eq!(child["reason"], "exit");
}

#[test]
fn fork_exec_of_a_non_cuda_child_leaves_it_untouched() {
    let run = Target::new("target_dynamic", "forkexec").args(&["forkexec"]).run();
    run.success();
    assert!(run.stdout.contains("child-sh"), "{run}");
    let r = run.report();
    assert_eq!(total(&r, "live_bytes"), MIB, "{run}");
}

#[test]
fn a_process_that_never_allocates_is_untouched() {
    let run = Target::new("target_dynamic", "none").args(&["none"]).run();
    run.success();
    assert_eq!(run.stdout, "hello\n", "{run}");
    assert_eq!(run.stderr, "", "{run}");
    assert!(run.files().is_empty(), "no file may be written{run}");
    // A bad setting is not reported by a process that never traces.
    let sh = Target::new("/bin/sh", "sh").args(&["-c", "echo plain"]).env("GPUSHIM_SIGNAL", "garbage").run();
    sh.success();
    assert_eq!((sh.stdout.as_str(), sh.stderr.as_str()), ("plain\n", ""), "{sh}");
    assert!(sh.files().is_empty(), "{sh}");
}

#[test]
fn missing_collector_leaves_the_program_unharmed_with_one_warning() {
    let run = Target::new("target_dynamic", "nocollector")
        .args(&["kinds"])
        .env("GPUSHIM_COLLECTOR", "/nonexistent/gpushim")
        .run();
    run.success();
    assert!(run.stdout.ends_with("ok\n"), "{run}");
    let warnings: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(warnings.len(), 1, "{run}");
    assert!(warnings[0].starts_with("gpushim: cannot start the collector '/nonexistent/gpushim'"), "{run}");
    assert!(run.files().is_empty(), "{run}");
}
