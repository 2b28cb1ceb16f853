//! A job stopped by its scheduler: `systemctl stop` (cgroup kill mode), `scancel` and a pod's
//! teardown send SIGTERM to every process of the job, the collector included, whatever its
//! session or process group. The collector finishes the report while its stream is open, and
//! the report's reason says the program was stopped.

use std::process::Command;

use crate::util::*;

/// The program's pid, from its collector's command line (`gpushim collect --output DIR --pid
/// PID`).
fn program_of(collector: i32) -> i32 {
    let cmdline = std::fs::read(format!("/proc/{collector}/cmdline")).unwrap();
    let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
    let at = args.iter().position(|a| *a == b"--pid").expect("the collector's --pid");
    std::str::from_utf8(args[at + 1]).unwrap().parse().unwrap()
}

#[test]
fn a_sigterm_to_the_collector_right_after_the_program_exits_leaves_the_report() {
    // The program's exit is released once its stream is read; the report is written after.
    // A scheduler's SIGTERM then (the job's main process has ended) killed the collector: no
    // file, no line.
    let t = Target::new("target_dynamic", "term-after-exit").args(&["pause", "0"]);
    let mut live = Live::start(&t);
    assert_eq!(live.line(), "ready");
    let c = the_collector(t.dir.path());
    live.close_stdin();
    let status = live.wait_exit();
    signal(c, libc::SIGTERM);
    let d = live.finish_after(status);
    assert!(d.status.success(), "{d}");
    assert!(wait_gone(c, DEADLINE), "the collector {c} still runs after its report{d}");
    let r = d.report_in(t.dir.path());
    assert_eq!(r["reason"], "exit", "the signal came after the program's exit{d}");
    assert_eq!(total(&r, "live_bytes"), 3 * MIB, "{d}");
    assert!(d.stderr.contains("gpushim: report written to "), "{d}");
}

#[test]
fn a_sigterm_to_every_process_of_the_job_leaves_a_report_that_says_stopped() {
    // A cgroup stop: the collector (its own process group) and the program get SIGTERM at
    // once; the program dies of it (default action).
    let t = Target::new("target_dynamic", "term-all").args(&["pause", "0"]);
    let mut live = Live::start(&t);
    assert_eq!(live.line(), "ready");
    let c = the_collector(t.dir.path());
    // Every event made before the stop has reached the collector (a snapshot holds them):
    // events still queued in the program when a signal kills it are lost.
    take_snapshot(live.pid);
    wait_catches(c, libc::SIGTERM);
    signal(c, libc::SIGTERM);
    signal(live.pid, libc::SIGTERM);
    let status = live.wait_exit();
    let d = live.finish_after(status);
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(d.status.signal(), Some(libc::SIGTERM), "{d}");
    let r = d.report_in(t.dir.path());
    assert_eq!(r["reason"], "stopped", "{d}");
    assert_eq!(r["signal"], "SIGTERM", "{d}");
    assert_eq!(total(&r, "live_bytes"), MIB, "the 1 MiB live before the signal{d}");
    assert!(d.stderr.contains(&format!("gpushim: pid {} (stopped by SIGTERM): ", d.pid())), "{d}");
}

#[test]
fn a_graceful_shutdown_under_gpushim_run_stopped_with_sigterm_leaves_the_report() {
    // SIGTERM to `gpushim run`, the program (which shuts down and exits 0) and the collector:
    // `run` passes the program's status on and the report says it was stopped.
    let dir = TempDir::new("term-graceful");
    let mut cmd = Command::new(collector());
    cmd.args(["run", "--output", dir.path().to_str().unwrap(), "--"])
        .arg(standin("target_dynamic"))
        .arg("graceful-term")
        .env("LD_LIBRARY_PATH", standins())
        .env_remove("LD_PRELOAD");
    let mut live = Live::spawn(cmd, "gpushim run -- target_dynamic graceful-term".into());
    assert_eq!(live.line(), "ready");
    let c = the_collector(dir.path());
    wait_catches(c, libc::SIGTERM);
    let program = program_of(c);
    for pid in [c, program, live.pid] {
        signal(pid, libc::SIGTERM);
    }
    let d = live.finish();
    assert!(d.status.success(), "the program's own status{d}");
    assert_eq!(d.stdout, ["ready", "stopping", "ok"], "{d}");
    assert!(!d.stderr.contains("no CUDA allocations"), "{d}");
    let r = d.report_in(dir.path());
    assert_eq!((r["reason"].as_str(), r["signal"].as_str()), (Some("stopped"), Some("SIGTERM")), "{d}");
    let notes = r["notes"].to_string();
    assert!(notes.contains("stopped by SIGTERM: the program ran its exit path after it"), "{d}");
    assert_eq!(total(&r, "live_bytes"), MIB, "the 1 MiB live before the signal{d}");
}

#[test]
fn a_ctrl_c_that_ends_the_program_under_gpushim_run_leaves_a_report_that_says_stopped() {
    // The terminal's Ctrl-C: SIGINT to the foreground process group, `gpushim run` and the
    // program, but not the collector (a process group of its own). The program dies of it; its
    // exit status, read from its zombie (run reaps it only after the collector is done), says
    // so: "stopped", not "killed".
    let dir = TempDir::new("ctrl-c");
    let mut cmd = Command::new(collector());
    cmd.args(["run", "--output", dir.path().to_str().unwrap(), "--"])
        .arg(standin("target_dynamic"))
        .args(["pause", "0"])
        .env("LD_LIBRARY_PATH", standins())
        .env_remove("LD_PRELOAD");
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let mut live = Live::spawn(cmd, "gpushim run -- target_dynamic pause 0".into());
    assert_eq!(live.line(), "ready");
    let c = the_collector(dir.path());
    let program = program_of(c);
    // Every event made before the signal has reached the collector (a snapshot holds them).
    take_snapshot(program);
    // SAFETY: a signal to the process group the test made.
    assert_eq!(unsafe { libc::kill(-live.pid, libc::SIGINT) }, 0);
    let d = live.finish();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(d.status.signal(), Some(libc::SIGINT), "run dies of the program's signal{d}");
    let r = d.report_in(dir.path());
    assert_eq!((r["reason"].as_str(), r["signal"].as_str()), (Some("stopped"), Some("SIGINT")), "{d}");
    assert!(r["notes"].to_string().contains("stopped by SIGINT: the program ended by it"), "{d}");
    assert!(d.stderr.contains(&format!("gpushim: pid {program} (stopped by SIGINT): ")), "{d}");
    assert_eq!(total(&r, "live_bytes"), MIB, "the 1 MiB live before the signal{d}");
}
