//! The `gpushim` command line: run, report, diff; user mistakes get one clear line.

use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, Stdio};

use crate::util::*;

#[test]
fn run_sets_up_the_shim_and_forwards_the_exit_code() {
    let dir = TempDir::new("cli-run");
    let out = Command::new(collector())
        .args(["run", "--output", dir.path().to_str().unwrap(), "--"])
        .arg(standin("target_dynamic"))
        .arg("kinds")
        .env("LD_LIBRARY_PATH", standins())
        .env_remove("LD_PRELOAD")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let reports = names_in(dir.path());
    assert_eq!(reports.len(), 1, "{err}");
    let v = read_json(&dir.path().join(&reports[0]), &err);
    assert_eq!(total(&v, "live_bytes"), 20 * MIB + 10240);
    // An output directory that does not exist yet is made; one that cannot be is one line.
    let sub = dir.path().join("new/reports");
    let out = Command::new(collector())
        .args(["run", "--output", sub.to_str().unwrap(), "--"])
        .arg(standin("target_dynamic"))
        .arg("kinds")
        .env("LD_LIBRARY_PATH", standins())
        .env_remove("LD_PRELOAD")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(names_in(&sub).len(), 1, "{}", String::from_utf8_lossy(&out.stderr));
    let file = dir.path().join(&reports[0]);
    let out = gpushim(["run", "--output", file.join("x").to_str().unwrap(), "--", "/bin/sh", "-c", "exit 0"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("cannot make it: "), "{err}");
    // Exit codes pass through.
    let out = gpushim(["run", "--", "/bin/sh", "-c", "exit 7"]);
    assert_eq!(out.status.code(), Some(7));
    let out = gpushim(["run", "--", "/nonexistent-program"]);
    assert_eq!(out.status.code(), Some(127));
    assert_eq!(String::from_utf8_lossy(&out.stderr).lines().count(), 1);
}

#[test]
fn report_renders_text_and_rejects_garbage_in_one_line() {
    let run = Target::new("leak_example", "cli-report").args(&["20"]).run();
    run.success();
    let path = run.dir.path().join(&run.files()[0]);
    let out = gpushim(["report", path.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("render"), "{text}");
    assert!(text.contains("MiB"), "{text}");
    let bad = run.dir.path().join("bad.json");
    std::fs::write(&bad, "{ not json").unwrap();
    // A damaged holders file beside a good report: the report, and one line about the file.
    let companion = path.with_file_name(path.file_name().unwrap().to_str().unwrap().replace(".json", ".holders.json"));
    std::fs::write(&companion, "{ not json").unwrap();
    let out = gpushim(["report", path.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("render"));
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("gpushim: cannot read holders file "), "{err}");
    assert!(err.trim_end().ends_with("the report is shown without who holds its memory"), "{err}");
    std::fs::remove_file(&companion).unwrap();
    for arg in [bad.to_str().unwrap(), "/nonexistent/report.json"] {
        let out = gpushim(["report", arg]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.starts_with("gpushim: "), "{err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[test]
fn diff_ranks_the_growing_site_first() {
    let small = Target::new("leak_example", "cli-diff-a").args(&["10"]).run();
    let big = Target::new("leak_example", "cli-diff-b").args(&["30"]).run();
    small.success();
    big.success();
    let a = small.dir.path().join(&small.files()[0]);
    let b = big.dir.path().join(&big.files()[0]);
    let out = gpushim(["diff", a.to_str().unwrap(), b.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let first_site_line = text.lines().find(|l| l.contains("render") || l.contains("load_model")).unwrap_or("");
    assert!(first_site_line.contains("render"), "{text}");
    assert!(text.contains("20.0 MiB"), "growth of 20 frames × 1 MiB{text}");
}

#[test]
fn out_of_memory_writes_an_oom_report_at_once() {
    let run = Target::new("target_dynamic", "oom").args(&["errors"]).env("STANDIN_DEVICE_BYTES", MIB).run();
    run.success();
    let pid = run.report()["pid"].as_u64().unwrap();
    let name = format!("gpushim-{pid}-oom-1.json");
    let oom = run.read(&name);
    assert_eq!(oom["reason"], "oom", "{run}");
    assert_eq!(oom["oom"]["size"].as_u64(), Some(2 * MIB), "{run}");
    assert_eq!(oom["oom"]["result"].as_i64(), Some(2), "{run}");
    let first = oom["oom"]["frames"].as_array().unwrap().iter().find(|f| f["internal"] == false).unwrap();
    assert_eq!(first["function"], "errors_oom", "{run}");
    assert!(run.stderr.contains(&name), "stderr names the file{run}");
    assert!(!run.files().iter().any(|f| f.contains("-oom-2")), "{run}");
}

#[test]
fn report_formats_folded_svg_perfetto() {
    let run = Target::new("leak_example", "formats").args(&["200"]).run();
    run.success();
    let path = run.dir.path().join(&run.files()[0]);
    let p = path.to_str().unwrap();
    let folded = gpushim(["report", p, "--format", "folded"]);
    let text = String::from_utf8_lossy(&folded.stdout);
    assert!(folded.status.success());
    assert!(text.lines().any(|l| l.ends_with(";render 209715200")), "{text}");
    assert!(text.lines().any(|l| l.ends_with(";load_model 33554432")), "{text}");
    let svg = gpushim(["report", p, "--format", "svg"]);
    let svg = String::from_utf8_lossy(&svg.stdout);
    assert!(svg.starts_with("<?xml") || svg.starts_with("<svg"), "{}", &svg[..svg.len().min(200)]);
    assert!(svg.contains("render"));
    let trace = gpushim(["report", p, "--format", "perfetto"]);
    let v: serde_json::Value = serde_json::from_slice(&trace.stdout).unwrap();
    let events = v["traceEvents"].as_array().unwrap();
    let counters: Vec<_> = events.iter().filter(|e| e["ph"] == "C").collect();
    assert!(!counters.is_empty());
    // The per-kind track ends at the report's live bytes.
    let per_kind = counters.iter().rfind(|e| e["name"] == "live bytes").unwrap();
    assert_eq!(per_kind["args"]["device"].as_u64(), Some(232 * MIB), "{per_kind}");
    assert_eq!(per_kind["args"]["managed"].as_u64(), Some(0), "{per_kind}");
}

#[test]
fn diff_of_a_snapshot_and_the_final_report_of_one_process() {
    let run = Target::new("target_dynamic", "diff-snap").args(&["snapshot"]).run();
    run.success();
    let pid = run.report()["pid"].as_u64().unwrap();
    let snap = run.dir.path().join(format!("gpushim-{pid}-snapshot-1.json"));
    let fin = run.dir.path().join(format!("gpushim-{pid}.json"));
    let out = gpushim(["diff", snap.to_str().unwrap(), fin.to_str().unwrap(), "--format", "json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["same_process"], true, "{v:#}");
    let text = serde_json::to_string(&v).unwrap();
    assert!(text.contains("snapshot_after"), "the new site is named: {v:#}");
}

/// Waits (bounded) until `dir` holds a file whose name contains `part`.
fn wait_for_file(dir: &std::path::Path, part: &str) -> String {
    let deadline = std::time::Instant::now() + DEADLINE;
    loop {
        // Not the temporary name a report is written under before it is linked into place.
        if let Some(n) = names_in(dir).into_iter().find(|n| n.contains(part) && !n.starts_with('.')) {
            return n;
        }
        assert!(std::time::Instant::now() < deadline, "no file named *{part}* in {}", dir.display());
        std::thread::yield_now();
    }
}

#[test]
fn snapshot_sends_the_signal_the_programs_shim_listens_to() {
    // GPUSHIM_SIGNAL=USR2: a SIGUSR1 would kill the program (its default action).
    let t = Target::new("target_dynamic", "snapshot-usr2").args(&["sleep-snapshot"]).env("GPUSHIM_SIGNAL", "USR2");
    let mut live = Live::start(&t);
    assert_eq!(live.line(), "ready");
    let path = take_snapshot(live.pid);
    assert!(path.ends_with("-snapshot-1.json"), "{path}");
    let d = live.finish();
    assert!(d.status.success(), "the program survived the snapshot{d}");
    // GPUSHIM_SIGNAL=none: no snapshot can be taken, and the program is not signalled.
    let t = Target::new("target_dynamic", "snapshot-none").args(&["sleep-snapshot"]).env("GPUSHIM_SIGNAL", "none");
    let mut live = Live::start(&t);
    assert_eq!(live.line(), "ready");
    let out = gpushim(["snapshot", &live.pid.to_string()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("GPUSHIM_SIGNAL=none") && err.lines().count() == 1, "{err}");
    let d = live.finish();
    assert!(d.status.success(), "{d}");
}

#[test]
fn snapshot_finds_the_report_directory_after_the_program_changed_its_working_directory() {
    // No GPUSHIM_OUTPUT: reports go to the working directory tracing started in. The program
    // then moves elsewhere; `gpushim snapshot` looked there and gave up.
    let t = Target::new("target_dynamic", "snapshot-chdir").args(&["sleep-snapshot"]);
    let elsewhere = t.dir.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let mut cmd = t.command();
    cmd.current_dir(t.dir.path()).env_remove("GPUSHIM_OUTPUT").env("TARGET_CHDIR", &elsewhere);
    let mut live = Live::spawn(cmd, t.describe());
    assert_eq!(live.line(), "ready");
    let out = gpushim(["snapshot", "--timeout", "10", &live.pid.to_string()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert_eq!(Path::new(&path).parent(), Some(t.dir.path()), "{path}");
    assert!(Path::new(&path).is_file(), "{path}");
    let d = live.finish();
    assert!(d.status.success(), "{d}");
}

#[test]
fn snapshot_finds_a_snapshot_written_to_the_fallback_directory() {
    // GPUSHIM_OUTPUT cannot be written (/proc): the collector falls back to $TMPDIR, where
    // `gpushim snapshot` did not look (it waited in /proc and gave up).
    let t = Target::new("target_dynamic", "snapshot-fallback").args(&["sleep-snapshot"]);
    let tmp = t.dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let mut cmd = t.command();
    cmd.env("GPUSHIM_OUTPUT", "/proc").env("TMPDIR", &tmp);
    let mut live = Live::spawn(cmd, t.describe());
    assert_eq!(live.line(), "ready");
    let out = gpushim(["snapshot", "--timeout", "10", &live.pid.to_string()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert_eq!(Path::new(&path).parent(), Some(tmp.as_path()), "{path}");
    let d = live.finish();
    assert!(d.status.success(), "{d}");
}

#[test]
fn snapshot_of_a_program_that_has_not_allocated_yet_says_so_at_once() {
    // `gpushim run -- sleep 30` then `gpushim snapshot`: no collector runs before the first
    // CUDA allocation, and the command waited its whole timeout for a file that could not come.
    let mut cmd = Command::new("sleep");
    cmd.arg("30").env("LD_PRELOAD", shim()).env("GPUSHIM_COLLECTOR", collector());
    let live = Live::spawn(cmd, "sleep 30 under the shim".into());
    // The shim is loaded once the dynamic loader has run; wait for it in the process's maps.
    let maps = format!("/proc/{}/maps", live.pid);
    let deadline = std::time::Instant::now() + DEADLINE;
    while !std::fs::read_to_string(&maps).is_ok_and(|m| m.contains("libgpushim")) {
        assert!(std::time::Instant::now() < deadline, "the shim never appeared in {maps}");
        std::thread::yield_now();
    }
    let out = gpushim(["snapshot", "--timeout", "30", &live.pid.to_string()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("has no collector: it has made no CUDA allocation yet"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    signal(live.pid, libc::SIGTERM);
    let _ = live.wait_exit();
}

#[test]
fn run_fail_on_leak_exits_3_on_suspects_or_live_bytes_over_the_limit() {
    let run = |flag: &str, scenario: &[&str]| {
        let dir = TempDir::new("fail-on-leak");
        let out = Command::new(collector())
            .args(["run", flag, "--output", dir.path().to_str().unwrap(), "--"])
            .arg(standin("target_dynamic"))
            .args(scenario)
            .env("LD_LIBRARY_PATH", standins())
            .env_remove("LD_PRELOAD")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        let line = err.lines().find(|l| l.starts_with("gpushim: leak check failed: ")).map(str::to_owned);
        (out.status.code(), line, err)
    };
    // A leak: the suspect fails the check.
    let (code, line, err) = run("--fail-on-leak", &["leak", "30"]);
    assert_eq!(code, Some(3), "{err}");
    assert!(line.as_deref().is_some_and(|l| l.contains("1 leak suspect (")), "{err}");
    // 20 MiB live at exit and no suspect: passes, unless over the limit given.
    let (code, line, err) = run("--fail-on-leak", &["kinds"]);
    assert_eq!((code, line), (Some(0), None), "{err}");
    let (code, line, err) = run("--fail-on-leak=16MiB", &["kinds"]);
    assert_eq!(code, Some(3), "{err}");
    assert!(
        line.as_deref().is_some_and(|l| l.contains("20.0 MiB live at exit, over --fail-on-leak=16.0 MiB")),
        "{err}"
    );
    let (code, line, err) = run("--fail-on-leak=64MiB", &["kinds"]);
    assert_eq!((code, line), (Some(0), None), "{err}");
    // The traced program below a shell (or `unshare`, a launcher): its report is checked too.
    let dir = TempDir::new("fail-on-leak-below");
    let out = Command::new(collector())
        .args(["run", "--fail-on-leak", "--output", dir.path().to_str().unwrap(), "--", "/bin/sh", "-c"])
        .arg("\"$@\"; exit $?")
        .arg("sh")
        .arg(standin("target_dynamic"))
        .args(["leak", "30"])
        .env("LD_LIBRARY_PATH", standins())
        .env_remove("LD_PRELOAD")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.lines().any(|l| l.starts_with("gpushim: leak check failed: 1 leak suspect (")), "{err}");
    // A failing program keeps its own exit status; a bad size is a usage error.
    let out = gpushim(["run", "--fail-on-leak", "--", "/bin/sh", "-c", "exit 7"]);
    assert_eq!(out.status.code(), Some(7));
    let out = gpushim(["run", "--fail-on-leak=lots", "--", "/bin/true"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--fail-on-leak=lots: not a number of bytes"));
}

#[test]
fn signals_sent_to_gpushim_run_reach_the_program() {
    let dir = TempDir::new("run-forwards");
    let mut cmd = Command::new(collector());
    cmd.args(["run", "--output", dir.path().to_str().unwrap(), "--"])
        .arg(standin("target_dynamic"))
        .arg("sleep-snapshot")
        .env("LD_LIBRARY_PATH", standins())
        .env_remove("LD_PRELOAD");
    let mut live = Live::spawn(cmd, "gpushim run -- target_dynamic sleep-snapshot".into());
    assert_eq!(live.line(), "ready");
    // SIGUSR1 to the wrapper's pid: a snapshot of the program.
    signal(live.pid, libc::SIGUSR1);
    wait_for_file(dir.path(), "-snapshot-1.json");
    // SIGTERM to the wrapper's pid: the program gets it, and the wrapper reports its end.
    signal(live.pid, libc::SIGTERM);
    let status = live.wait_exit();
    // The exit status passes through as timeout(1) passes it: run dies of the same signal.
    assert_eq!(status.signal(), Some(libc::SIGTERM), "{status:?}");
    // `run` returns once the collector has written the report of the killed program.
    let finals: Vec<String> =
        names_in(dir.path()).into_iter().filter(|n| n.ends_with(".json") && !n.contains("snapshot")).collect();
    assert_eq!(finals.len(), 1, "{finals:?}");
    let d = live.finish_after(status);
    let r = d.report_in(dir.path());
    // Run reaps the program after its collector is done: its zombie says SIGTERM ended it.
    assert_eq!((r["reason"].as_str(), r["signal"].as_str()), (Some("stopped"), Some("SIGTERM")), "{d}");
    assert_eq!(total(&r, "live_bytes"), MIB, "{d}");
}

#[test]
fn gpushim_run_returns_without_waiting_for_the_programs_background_children() {
    // The program leaves a child running (a daemon, a server it started): `run` waited for it
    // (it held the pipe run waits on) for 60 s, then said the collector was still running.
    // It must still wait for the collector of the CUDA program, which ran first.
    let dir = TempDir::new("run-background");
    let prog = format!("{} kinds >/dev/null; sleep 600 & echo $!", standin("target_dynamic").display());
    let mut cmd = Command::new(collector());
    cmd.args(["run", "--output", dir.path().to_str().unwrap(), "--", "/bin/sh", "-c", &prog])
        .env("LD_LIBRARY_PATH", standins())
        .env_remove("LD_PRELOAD");
    let mut live = Live::spawn(cmd, format!("gpushim run -- sh -c '{prog}'"));
    let sleeper: i32 = live.line().trim().parse().unwrap();
    let status = live.wait_exit();
    let still_running = std::path::Path::new(&format!("/proc/{sleeper}")).exists();
    signal(sleeper, libc::SIGKILL);
    let d = live.finish_after(status);
    assert!(still_running, "run returned while the background child ran{d}");
    assert!(d.status.success(), "{d}");
    assert!(!d.stderr.contains("still running"), "{d}");
    let reports: Vec<String> = names_in(dir.path()).into_iter().filter(|n| n.ends_with(".json")).collect();
    assert_eq!(reports.len(), 1, "the CUDA program's report was written before run returned{d}");
}

/// A shell program that counts the SIGINTs it gets ("INT n"), says "ready", and on SIGUSR2
/// says "USR2 after n" and dies of SIGINT.
const COUNTS_SIGINT: &str = "n=0; trap 'n=$((n+1)); echo INT $n' INT; \
    trap 'echo USR2 after $n; trap - INT; kill -INT $$' USR2; echo ready; while :; do sleep 0.05; done";

#[test]
fn sigint_sent_to_gpushim_run_alone_reaches_the_program() {
    // `kill -INT <pid of gpushim run>`: run ignored SIGINT (as time(1) does, for the terminal's
    // Ctrl-C), so the program never got it.
    let mut cmd = Command::new(collector());
    cmd.args(["run", "--", "/bin/sh", "-c", COUNTS_SIGINT]).env_remove("LD_PRELOAD");
    let mut live = Live::spawn(cmd, format!("gpushim run -- sh -c \"{COUNTS_SIGINT}\""));
    assert_eq!(live.line(), "ready");
    signal(live.pid, libc::SIGINT);
    assert_eq!(live.line(), "INT 1");
    signal(live.pid, libc::SIGUSR2);
    assert_eq!(live.line(), "USR2 after 1");
    let status = live.wait_exit();
    assert_eq!(status.signal(), Some(libc::SIGINT), "run dies of the program's signal, as timeout(1): {status:?}");
}

#[test]
fn ctrl_c_from_the_terminal_reaches_the_program_once() {
    // The terminal sends SIGINT to its whole foreground process group: run and the program. Run
    // must not pass its copy on too. gpushim run is started as a session leader on a new
    // pseudo-terminal, whose foreground group it then is.
    let (mut master, slave) = {
        let (mut m, mut s) = (0, 0);
        // SAFETY: openpty fills two descriptors; no name, termios or window size asked for.
        let rc = unsafe { libc::openpty(&mut m, &mut s, std::ptr::null_mut(), std::ptr::null(), std::ptr::null()) };
        assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
        // SAFETY: both descriptors are fresh and owned here alone.
        unsafe { (std::fs::File::from(OwnedFd::from_raw_fd(m)), OwnedFd::from_raw_fd(s)) }
    };
    let mut cmd = Command::new(collector());
    cmd.args(["run", "--", "/bin/sh", "-c", COUNTS_SIGINT])
        .env_remove("LD_PRELOAD")
        .stdin(Stdio::from(slave.try_clone().unwrap()))
        .stdout(Stdio::from(slave.try_clone().unwrap()))
        .stderr(Stdio::from(slave));
    // SAFETY: setsid and ioctl are async-signal-safe; stdin (0) is the terminal's slave side.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() == -1 || libc::ioctl(0, libc::TIOCSCTTY, 0) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    drop(cmd); // the parent's copies of the slave side: the terminal hangs up when run ends
    let pid = child.id() as i32;
    let mut writer = master.try_clone().unwrap();
    let (tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // Reads the terminal's output until the slave side closes (EIO), sending each line.
        let mut buf = [0u8; 256];
        let mut line = Vec::new();
        while let Ok(n) = master.read(&mut buf) {
            if n == 0 {
                break;
            }
            for &b in &buf[..n] {
                if b == b'\n' {
                    let l = String::from_utf8_lossy(&line).trim().replace("^C", "");
                    if tx.send(l).is_err() {
                        return;
                    }
                    line.clear();
                } else {
                    line.push(b);
                }
            }
        }
    });
    let next = |seen: &mut Vec<String>| {
        let l = lines.recv_timeout(DEADLINE).unwrap_or_else(|_| {
            signal(pid, libc::SIGKILL);
            panic!("no line from the terminal; so far: {seen:?}")
        });
        seen.push(l.clone());
        l
    };
    let mut seen = Vec::new();
    while next(&mut seen) != "ready" {}
    // Ctrl-C, typed on the terminal.
    writer.write_all(&[3]).unwrap();
    while next(&mut seen) != "INT 1" {}
    // Then SIGUSR2 to run alone, passed on: the program says how many SIGINTs it had by then.
    signal(pid, libc::SIGUSR2);
    let after = loop {
        let l = next(&mut seen);
        if l.starts_with("USR2") || l.starts_with("INT") {
            break l;
        }
    };
    assert_eq!(after, "USR2 after 1", "one Ctrl-C, one SIGINT: {seen:?}");
    let status = child.wait().unwrap();
    assert_eq!(status.signal(), Some(libc::SIGINT), "{status:?} {seen:?}");
}

#[test]
fn report_dash_reads_standard_input() {
    let run = Target::new("leak_example", "cli-report-stdin").args(&["20"]).run();
    run.success();
    let path = run.dir.path().join(&run.files()[0]);
    let out = Command::new(collector())
        .args(["report", "-", "--format", "folded"])
        .env_remove("LD_PRELOAD")
        .stdin(std::fs::File::open(&path).unwrap())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.lines().any(|l| l.ends_with(";render 20971520")), "20 frames × 1 MiB: {text}");
}

#[test]
fn errors_name_the_real_cause() {
    let dir = TempDir::new("cli-causes");
    let d = dir.path().to_str().unwrap().to_string();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let f = file.to_str().unwrap().to_string();
    let one_line = |args: &[&str], want: &str| {
        let out = gpushim(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.trim_end().ends_with(want), "{args:?}: want …{want}: {err}");
    };
    let missing = format!("{d}/missing.json");
    let under_file = format!("{f}/r.json");
    // A directory is a job view; this one holds no report.
    one_line(
        &["report", &d],
        &format!("{d}: no final report (gpushim-PID.json or gpushim-rankR-PID.json) in this directory"),
    );
    one_line(&["report", &missing], &format!("cannot read report {missing}: no such file"));
    one_line(&["report", &under_file], &format!("cannot read report {under_file}: not a directory"));
    one_line(&["diff", &d, &missing], &format!("cannot read report {d}: is a directory"));
    // Output paths: a report written over a directory, under a file; run's --output a file.
    let run = Target::new("leak_example", "cli-causes-out").args(&["1"]).run();
    run.success();
    let report = run.dir.path().join(&run.files()[0]);
    let r = report.to_str().unwrap();
    one_line(&["report", r, "-o", &d], &format!("cannot create {d}: is a directory"));
    one_line(&["report", r, "-o", &under_file], &format!("cannot create {under_file}: not a directory"));
    one_line(
        &["run", "-o", &f, "--", "true"],
        &format!("output directory {f}: not a directory; choose another --output"),
    );
}

#[test]
fn bad_settings_warn_in_one_line_each_and_go_into_the_reports_notes() {
    // GPUSHIM_MAX_FRAMES=1000 was refused ("not a number from 1 to 256; using 64") instead of
    // clamped; GPUSHIM_BACKTRACE=maybe and GPUSHIM_PYTHON=x were taken silently; nothing went
    // into the report.
    let want = [
        "GPUSHIM_BACKTRACE=maybe is not a switch (1, on, yes, true or 0, off, no, false); backtraces stay on",
        "GPUSHIM_MAX_FRAMES=1000 is above 256; using 256",
        "GPUSHIM_PYTHON=x is not a switch (1, on, yes, true or 0, off, no, false); Python frames stay on",
        "GPUSHIM_EXIT_TIMEOUT=0 is not a whole number of seconds above 0; using 60",
        // A misspelt name was ignored without a word.
        "GPUSHIM_OUPTUT is no gpushim setting (did you mean GPUSHIM_OUTPUT?); it is ignored",
    ];
    let run = Target::new("leak_example", "cli-bad-settings")
        .env("GPUSHIM_OUPTUT", "/tmp/elsewhere")
        .args(&["3"])
        .env("GPUSHIM_BACKTRACE", "maybe")
        .env("GPUSHIM_MAX_FRAMES", "1000")
        .env("GPUSHIM_PYTHON", "x")
        // 0 made the program exit before its events reached the collector: a "killed" report
        // with nothing in it.
        .env("GPUSHIM_EXIT_TIMEOUT", "0")
        .run();
    run.success();
    let said: Vec<&str> =
        run.stderr.lines().filter_map(|l| l.strip_prefix("gpushim: ")).filter(|l| l.starts_with("GPUSHIM_")).collect();
    assert_eq!(said, want, "{run}");
    let r = run.report();
    let notes: Vec<&str> = r["notes"].as_array().unwrap().iter().filter_map(|n| n.as_str()).collect();
    for w in want {
        assert!(notes.contains(&w), "{w} in notes {notes:?}{run}");
    }
    assert_eq!(total(&r, "live_bytes"), 3 * MIB + 32 * MIB, "backtraces on, the program traced as usual{run}");
}

#[test]
fn the_readme_lists_every_setting_the_misspelling_check_knows() {
    // The settings' table and the list a misspelt name is checked against (wire's
    // `setting::KNOWN`) are the same names.
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let mut rows: Vec<&str> =
        readme.lines().filter_map(|l| l.strip_prefix("| `GPUSHIM_")).filter_map(|l| l.split('`').next()).collect();
    rows.sort_unstable();
    let mut known: Vec<&str> = gpushim_wire::setting::KNOWN.iter().map(|k| k.trim_start_matches("GPUSHIM_")).collect();
    known.sort_unstable();
    assert_eq!(rows, known);
}

#[test]
fn readme_says_that_gpushim_run_sets_gpushim_collector() {
    // A newcomer's trial: the variable table said only "path of the gpushim binary".
    let out = gpushim(["run", "--", "/bin/sh", "-c", "echo \"$GPUSHIM_COLLECTOR\""]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), collector().to_str().unwrap());
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let row = readme.lines().find(|l| l.starts_with("| `GPUSHIM_COLLECTOR` |")).expect("a GPUSHIM_COLLECTOR row");
    assert!(row.contains("`gpushim run` sets it"), "{row}");
}

#[test]
fn gpushim_run_says_when_the_run_made_no_cuda_allocation() {
    let said = |out: &std::process::Output| {
        String::from_utf8_lossy(&out.stderr).lines().filter(|l| *l == "gpushim: no CUDA allocations: no report").count()
    };
    // No CUDA at all: one line, from run, and the exit status passes through.
    let out = gpushim(["run", "--", "/bin/sh", "-c", "exit 3"]);
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(said(&out), 1, "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stderr).lines().count(), 1, "{}", String::from_utf8_lossy(&out.stderr));
    // The CUDA program is the program's child, which does not hold run's pipe: not said.
    let dir = TempDir::new("run-nested-cuda");
    let prog = format!("{} kinds >/dev/null; true", standin("target_dynamic").display());
    let out = Command::new(collector())
        .args(["run", "--output", dir.path().to_str().unwrap(), "--", "/bin/sh", "-c", &prog])
        .env("LD_LIBRARY_PATH", standins())
        .env_remove("LD_PRELOAD")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(said(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    // The same program under the shim without `gpushim run`: the library never says it.
    let out = Command::new("/bin/sh")
        .args(["-c", "exit 0"])
        .env("LD_PRELOAD", shim())
        .env("GPUSHIM_COLLECTOR", collector())
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
}

#[test]
fn diff_warns_when_old_is_newer_than_new_or_of_another_program() {
    let first = Target::new("leak_example", "cli-diff-first").args(&["10"]).run();
    let second = Target::new("leak_example", "cli-diff-second").args(&["30"]).run();
    let other = Target::new("target_dynamic", "cli-diff-other").args(&["kinds"]).run();
    let path = |o: &Outcome| o.dir.path().join(&o.files()[0]).to_str().unwrap().to_string();
    let (a, b, c) = (path(&first), path(&second), path(&other));
    let warnings = |old: &str, new: &str| {
        let out = gpushim(["diff", old, new]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stderr).lines().map(str::to_string).collect::<Vec<_>>()
    };
    assert_eq!(warnings(&a, &b), Vec::<String>::new(), "the same program, in order");
    let swapped = warnings(&b, &a);
    assert_eq!(swapped.len(), 1, "{swapped:?}");
    assert!(
        swapped[0].starts_with("gpushim: warning: OLD (pid ") && swapped[0].contains("started after NEW"),
        "{swapped:?}"
    );
    let programs = warnings(&b, &c);
    assert_eq!(
        programs,
        ["gpushim: warning: OLD and NEW are reports of different programs (leak_example and target_dynamic): their \
          sites may not match"],
    );
}

#[test]
fn demo_script_honours_cargo_target_dir() {
    // demo.sh ran target/release/gpushim, which is not there when CARGO_TARGET_DIR puts the
    // build elsewhere. (It runs `gpushim demo`, which finds the stand-ins beside the executable
    // it resolves to, here this build's.) A stand-in `cargo` (its build does nothing; its metadata names
    // CARGO_TARGET_DIR as cargo does) and a target directory whose release/ is this build.
    let dir = TempDir::new("demo-target-dir");
    let fake = dir.path().join("bin");
    std::fs::create_dir(&fake).unwrap();
    script(
        &fake,
        "cargo",
        "#!/bin/sh\ncase \"$1\" in\n  metadata) printf '{\"packages\":[],\"target_directory\":\"%s\",\"version\":1}\\n' \
         \"$CARGO_TARGET_DIR\" ;;\n  build) exit 0 ;;\n  *) exit 1 ;;\nesac\n",
    );
    let target = dir.path().join("elsewhere");
    std::fs::create_dir(&target).unwrap();
    std::os::unix::fs::symlink(bin_dir(), target.join("release")).unwrap();
    let out_dir = dir.path().join("out");
    let path = format!("{}:{}", fake.display(), std::env::var("PATH").unwrap_or_default());
    let out = Command::new("bash")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/demo.sh"))
        .env("PATH", path)
        .env("CARGO_TARGET_DIR", &target)
        .env("GPUSHIM_OUTPUT", &out_dir)
        .env_remove("LD_PRELOAD")
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("render"), "the report for a person: {stdout}");
    // `gpushim demo` puts each example's reports in a directory of its own: the C one's in c/.
    let reports: Vec<String> = names_in(&out_dir.join("c")).into_iter().filter(|n| n.ends_with(".json")).collect();
    assert_eq!(reports.len(), 1, "{reports:?}");
    let r = read_json(&out_dir.join("c").join(&reports[0]), &stderr);
    assert_eq!(total(&r, "live_bytes"), 200 * MIB + 32 * MIB, "200 frames × 1 MiB and the 32 MiB model");
}

/// `GPUSHIM_HTML=1` writes the HTML page beside the JSON; `gpushim report --format html` and
/// `--format torch-snapshot`, and `gpushim diff --format html`, write theirs; the report lists
/// every live allocation with its address and size (what the torch snapshot's segments are).
#[test]
fn html_page_and_torch_snapshot() {
    let run = Target::new("leak_example", "html").args(&["20"]).env("GPUSHIM_HTML", 1).run();
    run.success();
    let r = run.report();
    let pid = r["pid"].as_u64().unwrap();
    let json = run.dir.path().join(format!("gpushim-{pid}.json"));
    let beside = std::fs::read_to_string(run.dir.path().join(format!("gpushim-{pid}.html"))).unwrap();
    assert!(beside.starts_with("<!DOCTYPE html>") && beside.contains("\"render\""), "{run}");
    // The live set: 20 frames of 1 MiB and the 32 MiB model, one entry each, by address.
    let allocs = r["allocations"].as_array().unwrap();
    assert_eq!(allocs.len() as u64, total(&r, "live_count"), "{run}");
    assert_eq!(allocs.len(), 21, "{run}");
    assert_eq!(allocs.iter().map(|a| a["size"].as_u64().unwrap()).sum::<u64>(), total(&r, "live_bytes"));
    assert_eq!(allocs.iter().filter(|a| a["size"] == MIB).count(), 20, "{run}");
    let addr = |a: &serde_json::Value| u64::from_str_radix(a["address"].as_str().unwrap().trim_start_matches("0x"), 16);
    assert!(allocs.windows(2).all(|w| addr(&w[0]).unwrap() < addr(&w[1]).unwrap()), "{run}");

    let p = json.to_str().unwrap();
    let html = run.dir.path().join("r.html");
    let out = gpushim(["report", p, "--format", "html", "-o", html.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read_to_string(&html).unwrap(), beside, "the same page either way");
    let out = gpushim(["report", p, "--format", "torch-snapshot"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // A pickle, protocol 3 (Python 3 reads it), ending with its STOP opcode.
    assert_eq!(&out.stdout[..2], b"\x80\x03");
    assert_eq!(out.stdout.last(), Some(&b'.'));
    let out = gpushim(["diff", p, p, "--format", "html"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("<!DOCTYPE html>"));
}

#[test]
fn a_fifo_or_a_device_named_like_a_report_in_the_job_directory_is_said_in_one_line_unread() {
    let dir = TempDir::new("cli-report-fifo");
    let fifo = dir.path().join("gpushim-5.json");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    // Were the FIFO opened for reading, this writer's open returns and its close ends the read
    // (nothing written): the command then ends either way.
    let f = fifo.clone();
    let writer = std::thread::spawn(move || drop(std::fs::OpenOptions::new().write(true).open(&f)));
    let zero = TempDir::new("cli-report-zero");
    std::os::unix::fs::symlink("/dev/zero", zero.path().join("gpushim-6.json")).unwrap();
    for (d, name) in [(&dir, "gpushim-5.json"), (&zero, "gpushim-6.json")] {
        let out = gpushim(["report", d.path().to_str().unwrap()]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        let want = format!("gpushim: cannot read report {}: not a regular file", d.path().join(name).display());
        assert_eq!(err.trim_end(), want, "{err}");
    }
    // Nothing opened the FIFO: a reader that does not wait lets the writer go.
    use std::os::unix::fs::OpenOptionsExt;
    let _reader = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(&fifo).unwrap();
    writer.join().unwrap();
}

/// `GPUSHIM_RECORD` names a directory that does not exist yet: it is made (as `GPUSHIM_OUTPUT`
/// is), and the stream and its frames are named by the traced program's pid; the stream read
/// again gives the same suspects, totals and frames.
#[test]
fn a_recorded_stream_read_again_gives_the_same_suspects() {
    let top = TempDir::new("cli-record");
    let rec = top.path().join("rec").join("stream");
    let run = Target::new("leak_example", "cli-record-run").args(&["20"]).env("GPUSHIM_RECORD", rec.display()).run();
    run.success();
    let first = read_json(&run.dir.path().join(&run.files()[0]), &run);
    let pid = first["pid"].as_u64().unwrap();
    // The stream, and the frames its return addresses were symbolized to (for reading it again
    // where the program's libraries are not).
    let streams = names_in(&rec);
    assert_eq!(streams, [format!("stream-{pid}.frames.json"), format!("stream-{pid}.gpushim")], "{run}");
    let stream = rec.join(format!("stream-{pid}.gpushim"));
    let again = TempDir::new("cli-record-again");
    let out = gpushim(["collect", "--input", stream.to_str().unwrap(), "--output", again.path().to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let json: Vec<String> = names_in(again.path()).into_iter().filter(|n| n.ends_with(".json")).collect();
    let second = read_json(&again.path().join(json.iter().find(|n| !n.contains(".holders")).unwrap()), &run);
    let suspects = |r: &serde_json::Value| -> Vec<(u64, u64, String)> {
        r["suspects"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                (
                    s["site"].as_u64().unwrap(),
                    s["live_bytes"].as_u64().unwrap(),
                    s["reason"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    assert!(!suspects(&first).is_empty(), "{first}");
    assert_eq!(suspects(&first), suspects(&second));
    assert_eq!(first["totals"], second["totals"]);
    let frames =
        |r: &serde_json::Value| r["sites"].as_array().unwrap().iter().map(|s| s["frames"].clone()).collect::<Vec<_>>();
    assert_eq!(frames(&first), frames(&second));
}
