//! Ends of a program that the shim's exit path must survive (tests/programs/exits.c,
//! nostart.c): `exit()` from a signal handler that interrupted `malloc`, a vfork child's
//! `exit()`, a program without `__libc_start_main`, two threads calling `exit()` at once.

use crate::util::*;

/// Runs of the signal-exit scenario. Before the fix 27 of 40 runs hung for ever (the shim's
/// thread-local destructors, run by `exit()` on the exiting thread, freed memory while the
/// interrupted `malloc` held the arena's lock); each run is bounded by `util::DEADLINE`.
const SIGNAL_EXIT_RUNS: usize = 12;

#[test]
fn exit_from_a_signal_handler_that_interrupted_malloc_never_hangs() {
    for run in 0..SIGNAL_EXIT_RUNS {
        let t = Target::new("exits", &format!("signal-exit-{run}")).args(&["signal-exit"]);
        let d = run_bounded(&t);
        assert_eq!(d.status.code(), Some(7), "run {run}{d}");
        // The writer may be stuck behind the lock the handler's thread holds (the report then
        // says "killed", the exit path having waited 2 s for it at most); else a whole report.
        let r = d.report_in(t.dir.path());
        assert_eq!(total(&r, "live_bytes"), MIB, "run {run}{d}");
        assert!(matches!(r["reason"].as_str(), Some("exit" | "killed")), "run {run}{d}");
    }
}

#[test]
fn a_vfork_childs_exit_after_a_failed_exec_leaves_the_parents_report_an_exit() {
    // The child's exit() ran glibc's exit handlers and library destructors in the memory it
    // shares with its parent, which glibc then marks done: the parent's exit ran none, the
    // shim's destructor included, and its report said "killed".
    let t = Target::new("exits", "vfork-exit").args(&["vfork-exit"]);
    let d = run_bounded(&t);
    assert!(d.status.success(), "{d}");
    assert_eq!(d.stdout, ["child status 127", "ok"], "{d}");
    let r = d.report_in(t.dir.path());
    assert_eq!(r["reason"], "exit", "{d}");
    assert_eq!((total(&r, "alloc_count"), total(&r, "live_bytes")), (2, 2 * MIB), "{d}");
}

#[test]
fn a_program_without_libc_start_main_ends_its_report_as_an_exit() {
    // `-nostartfiles`: nothing registers the loader's `_dl_fini`, so no library's destructor
    // (the shim's end of the stream) runs at its exit(); its report said "killed".
    let t = Target::new("nostart", "nostart");
    let d = run_bounded(&t);
    assert!(d.status.success(), "{d}");
    assert_eq!(d.stdout, ["ok"], "{d}");
    let r = d.report_in(t.dir.path());
    assert_eq!(r["reason"], "exit", "{d}");
    assert_eq!((total(&r, "alloc_count"), total(&r, "live_bytes")), (1, MIB), "{d}");
}

/// Runs of the two-exits scenario: before the fix 4 of 10 ended with the second caller's status.
const TWO_EXITS_RUNS: usize = 5;

#[test]
fn a_second_thread_calling_exit_while_the_first_exits_keeps_the_first_ones_status() {
    // The main thread calls exit(3); once it is blocked in a system call there (only the shim's
    // exit path blocks: its scan waits for the writer), a second thread calls exit(4). The
    // first caller's status must win, as without the shim; the second caller waits.
    for run in 0..TWO_EXITS_RUNS {
        let t = Target::new("exits", &format!("two-exits-{run}")).args(&["two-exits"]);
        let d = run_bounded(&t);
        assert_eq!(d.status.code(), Some(3), "run {run}{d}");
        let r = d.report_in(t.dir.path());
        assert_eq!((r["reason"].as_str(), total(&r, "live_bytes")), (Some("exit"), MIB), "run {run}{d}");
    }
}
