//! The target's life: normal exit, SIGKILL, fork without exec, fork+exec of non-CUDA programs,
//! processes that never touch CUDA, and a collector that cannot be started.

use crate::util::*;

#[test]
fn killed_target_still_gets_a_report_with_reason_killed() {
    use std::io::{BufRead, BufReader, Read};
    let t = Target::new("target_dynamic", "kill").args(&["sleep-snapshot"]);
    let mut child = t
        .command()
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");
    // A snapshot proves the collector holds every event so far; then SIGKILL, no exit path.
    let snap = std::process::Command::new(collector()).args(["snapshot", &child.id().to_string()]).output().unwrap();
    assert!(snap.status.success(), "{}", String::from_utf8_lossy(&snap.stderr));
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(libc::SIGKILL));
    // The collector shares the target's stderr: its end means the report is written.
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    let path = t.dir.path().join(format!("gpushim-{}.json", child.id()));
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{e}: {err}"))).unwrap();
    assert_eq!(r["reason"], "killed", "{err}");
    assert_eq!(total(&r, "live_bytes"), MIB, "{err}");
    assert_eq!(sites_with(&r, "sleeper_before").len(), 1, "{err}");
    assert!(err.contains("(killed)"), "the summary says how the program ended: {err}");
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
