//! `gpushim top`: the live view read from the collector's control endpoint, against
//! `target_dynamic grow N SIZE MS`, whose one site (`grow_step`) grows by SIZE bytes every MS ms
//! on absolute deadlines: `--json` and `--once` show it on top with its rate within 10%, a
//! snapshot request writes a report, bad input gets one line, and the full-screen view under
//! tmux (send-keys, capture-pane) shows the site, says when the terminal is too small, shows
//! the site's stack on Enter (saying that more lines follow, and scrolling, in a short
//! terminal), writes the first snapshot on `d` and says so, shows what grew since it on the
//! next `d` (its diff wrapped in a narrower terminal), takes a snapshot on `s` and gives the
//! shell back on `q`. Without
//! tmux that test says it is skipped (.ci/run installs tmux). On `gpushim run`'s pid with two
//! traced processes, one row per process, the leaking one's naming its suspect. The sites of
//! one line of a Python program are one row and one suspect, as in its final report.
//!
//! Waits are on conditions against `DEADLINE`: the program's "ready" line (after its first
//! allocation), then its collector's answer (it listens from its first sample on: `top` saying
//! that no collector answers is polled again, not a failure), a frame whose samples cover the
//! window, the pane's text.

use std::io::{BufRead, BufReader, Write};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::util::*;

/// Bytes per allocation and ms between them: 1,638,400 bytes per second.
const SIZE: u64 = 16384;
const EVERY_MS: u64 = 10;
const RATE: f64 = SIZE as f64 * 1000.0 / EVERY_MS as f64;
/// Growth window asked for, seconds.
const WINDOW: &str = "3";

/// `target_dynamic grow` under the shim for long enough to watch (40 s at most).
fn grower(test: &str) -> Target {
    Target::new("target_dynamic", test).args(&["grow", "4000", &SIZE.to_string(), &EVERY_MS.to_string()])
}

/// `gpushim ARGS`, its output.
fn top(args: &[&str]) -> Output {
    Command::new(collector()).args(args).output().expect("running gpushim top")
}

/// Polls `f` until it gives a value or `DEADLINE` passes (then fails with `what`).
fn until<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    poll(what, || f().ok_or_else(String::new))
}

/// Polls `f` until it gives a value or `DEADLINE` passes (then fails with `what` and the last
/// reason `f` gave for having none).
fn poll<T>(what: &str, mut f: impl FnMut() -> Result<T, String>) -> T {
    let end = Instant::now() + DEADLINE;
    loop {
        let why = match f() {
            Ok(v) => return v,
            Err(why) => why,
        };
        assert!(Instant::now() < end, "timed out waiting for {what}: {why}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `gpushim top ARGS` on a traced program known to have allocated: its output once its
/// collector answers. Its collector listens from its first sample (about a second after the
/// first allocation) on, so until then `top` says that no collector answers: that is polled
/// again; any other failure fails at once.
fn top_answered(args: &[&str]) -> Output {
    poll("the collector's answer", || {
        let out = top(args);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        if out.status.success() {
            Ok(out)
        } else if err.contains("no collector answers") {
            Err(format!("gpushim {args:?}: {err}"))
        } else {
            panic!("gpushim {args:?}: {err}")
        }
    })
}

/// A JSON frame of `pid` (which has allocated) whose samples cover the whole window.
fn full_frame(pid: i32) -> Value {
    until("a frame covering the window", || {
        let out = top_answered(&["top", &pid.to_string(), "--json", "--window", WINDOW]);
        let v: Value = serde_json::from_slice(&out.stdout).expect("a JSON frame");
        (v["window_covered_s"].as_f64().unwrap() >= 2.9).then_some(v)
    })
}

/// `text` ("+1.6 MiB/s") as bytes per second.
fn parse_rate(text: &str) -> f64 {
    let t = text.trim_start_matches('+').trim_end_matches("/s");
    let (num, unit) = t.split_once(' ').unwrap_or((t, "B"));
    let mul = match unit {
        "B" => 1.0,
        "KiB" => 1024.0,
        "MiB" => 1048576.0,
        "GiB" => 1073741824.0,
        u => panic!("unit {u} in {text}"),
    };
    num.parse::<f64>().unwrap() * mul
}

fn within_10_percent(got: f64) -> bool {
    (got - RATE).abs() <= 0.1 * RATE
}

/// One request line to the collector of `pid`, its reply; `None` while its control socket is
/// not listening yet (it listens from its first sample on).
fn try_ask(pid: i32, request: &str) -> Option<Value> {
    let addr = SocketAddr::from_abstract_name(format!("gpushim-{pid}").as_bytes()).unwrap();
    UnixStream::connect_addr(&addr).ok()?;
    Some(ask(pid, request))
}

/// One request line to the collector of `pid`, its reply.
fn ask(pid: i32, request: &str) -> Value {
    let addr = SocketAddr::from_abstract_name(format!("gpushim-{pid}").as_bytes()).unwrap();
    let conn = UnixStream::connect_addr(&addr).expect("the control socket");
    conn.set_read_timeout(Some(DEADLINE)).unwrap();
    (&conn).write_all(format!("{request}\n").as_bytes()).unwrap();
    let mut line = String::new();
    BufReader::new(&conn).read_line(&mut line).unwrap();
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
}

#[test]
fn once_and_json_show_the_growing_site_on_top_with_its_rate() {
    let t = grower("top-once");
    let dir = t.dir.path().to_path_buf();
    let mut live = Live::start(&t);
    assert_eq!(live.line(), "ready");
    let pid = live.pid;
    let f = full_frame(pid);
    assert_eq!((f["format"].as_str(), f["pid"].as_i64()), (Some("gpushim-top-frame"), Some(i64::from(pid))));
    let first = &f["sites"][0];
    assert!(first["headline"].as_str().unwrap().contains("grow_step"), "{f:#}");
    let growth = first["growth_bytes_per_s"].as_f64().unwrap();
    assert!(within_10_percent(growth), "growth {growth} against {RATE}: {f:#}");
    assert!(
        first["frames"].as_array().unwrap().iter().any(|fr| fr.as_str().unwrap().contains("scenario_grow")),
        "{f:#}"
    );
    assert!(!f["series"].as_array().unwrap().is_empty());
    // The endpoint adds no file to the output directory.
    assert_eq!(names_in(&dir), Vec::<String>::new());

    let once = top(&["top", &pid.to_string(), "--once", "--window", WINDOW]);
    let text = String::from_utf8_lossy(&once.stdout).into_owned();
    assert!(once.status.success(), "{text}{}", String::from_utf8_lossy(&once.stderr));
    let row = text.lines().nth(5).unwrap_or_else(|| panic!("no site row: {text}"));
    assert!(row.contains("grow_step"), "{text}");
    let cells: Vec<&str> = row.split("  ").map(str::trim).filter(|c| !c.is_empty()).collect();
    let rate = parse_rate(cells[2]);
    assert!(within_10_percent(rate), "rate {rate} ({}) against {RATE}: {text}", cells[2]);

    // A snapshot asked for on the socket: a report of the live set, labelled `top`.
    let reply = ask(pid, "snapshot");
    let path = PathBuf::from(reply["snapshot"].as_str().unwrap_or_else(|| panic!("{reply}")));
    assert_eq!(path.parent(), Some(dir.as_path()));
    assert!(path.file_name().unwrap().to_str().unwrap().starts_with(&format!("gpushim-{pid}-snapshot-top-1")));
    let r = read_json(&path, &"the snapshot");
    assert_eq!((r["reason"].as_str(), r["label"].as_str()), (Some("snapshot"), Some("top")));
    assert!(the_site(&r, "grow_step", &"the snapshot")["live_count"].as_u64().unwrap() > 0);
    assert!(ask(pid, "nonsense")["error"].as_str().unwrap().contains("unknown request"));
    // The program's own snapshot 1, then `gpushim diff` of it and top's snapshot 1: each side
    // named apart, top's with its label, in the text and the HTML page's heading.
    let own = take_snapshot(pid);
    assert!(own.ends_with(&format!("gpushim-{pid}-snapshot-1.json")), "{own}");
    let d = top(&["diff", &own, path.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&d.stdout).into_owned();
    let head = text.lines().next().unwrap_or_default();
    assert!(
        head.starts_with(&format!("pid {pid} (snapshot 1, "))
            && head.contains(&format!(" -> pid {pid} (snapshot 1 \"top\", "))
            && head.ends_with("; same process"),
        "{text}{}",
        String::from_utf8_lossy(&d.stderr)
    );
    let d = top(&["diff", &own, path.to_str().unwrap(), "--format", "html"]);
    let html = String::from_utf8_lossy(&d.stdout).into_owned();
    assert!(html.contains(&format!("\"new\":\"pid {pid} snapshot 1 \\\"top\\\" (")), "{html}");

    // The collector gone while the program runs: one line.
    signal(the_collector(&dir), libc::SIGKILL);
    let out = until("the collector's end", || {
        let o = top(&["top", &pid.to_string(), "--once"]);
        (!o.status.success()).then_some(o)
    });
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(&format!("pid {pid} runs under gpushim but no collector answers")), "{err}");
    signal(pid, libc::SIGKILL);
    let _ = live.wait_exit();
}

#[test]
fn a_pid_that_is_not_traced_gets_one_line() {
    let mut sleeper = Command::new("sleep").arg("30").spawn().unwrap();
    let pid = sleeper.id().to_string();
    for (args, want) in [
        (vec!["top", &pid, "--once"], format!("pid {pid} is not running under gpushim")),
        (vec!["top", "999999999", "--once"], "no process 999999999".to_string()),
        (vec!["top", &pid, "--window", "0"], "--window 0: a number of seconds above 0".to_string()),
    ] {
        let out = top(&args);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(&want), "{args:?}: {err}");
    }
    let _ = sleeper.kill();
    let _ = sleeper.wait();
}

/// A tmux server of the test's own, killed when dropped.
struct Tmux(String);

impl Tmux {
    fn cmd(&self, args: &[&str]) -> Output {
        Command::new("tmux").arg("-L").arg(&self.0).args(args).output().expect("running tmux")
    }
    fn pane(&self) -> String {
        String::from_utf8_lossy(&self.cmd(&["capture-pane", "-p", "-t", "top"]).stdout).into_owned()
    }
    fn wait_for(&self, what: &str, f: impl Fn(&str) -> bool) -> String {
        until(what, || {
            let p = self.pane();
            f(&p).then_some(p)
        })
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd(&["kill-server"]);
    }
}

/// The full-screen view on `gpushim run`'s pid, under tmux: the growing site on top, `s` shows
/// a snapshot's path, `q` leaves the alternate screen and the shell has the pane again.
#[test]
fn the_full_screen_view_under_tmux() {
    if Command::new("tmux").arg("-V").output().is_err() {
        eprintln!("SKIPPED the_full_screen_view_under_tmux: tmux is not installed (apt-get install tmux)");
        return;
    }
    let t = grower("top-tmux");
    let dir = t.dir.path().to_path_buf();
    let mut run = Command::new(collector());
    run.arg("run").arg("-o").arg(&dir).arg("--").arg(standin("target_dynamic"));
    run.args(["grow", "4000", &SIZE.to_string(), &EVERY_MS.to_string()]);
    run.env("LD_LIBRARY_PATH", standins()).env_remove("LD_PRELOAD").env_remove("GPUSHIM_OUTPUT");
    let mut live = Live::spawn(run, "gpushim run -- target_dynamic grow".into());
    assert_eq!(live.line(), "ready");
    // The view's first frame needs the collector to answer (it exits otherwise).
    top_answered(&["top", &live.pid.to_string(), "--once"]);
    let tmux = Tmux(format!("gpushim-test-{}", std::process::id()));
    let shell = "env PS1=READY$ sh";
    let out = tmux.cmd(&["new-session", "-d", "-s", "top", "-x", "150", "-y", "40", shell]);
    assert!(out.status.success(), "tmux: {}", String::from_utf8_lossy(&out.stderr));
    tmux.wait_for("the shell's prompt", |p| p.contains("READY$"));
    let line = format!("{} top {} --window {WINDOW}", collector().display(), live.pid);
    tmux.cmd(&["send-keys", "-t", "top", &line, "Enter"]);
    let pane = tmux.wait_for("the growing site on top", |p| {
        let mut rows = p.lines().skip_while(|l| !l.contains("LIVE"));
        rows.next().is_some() && rows.next().is_some_and(|r| r.contains("grow_step") && r.contains("suspect"))
    });
    assert!(pane.contains("sites by live bytes"), "{pane}");
    // Too small a terminal: one line says so; back at full size, the view again.
    tmux.cmd(&["resize-window", "-t", "top", "-x", "50", "-y", "10"]);
    tmux.wait_for("the too-small line", |p| p.contains("the terminal is 50x10; it needs 60x14"));
    tmux.cmd(&["resize-window", "-t", "top", "-x", "150", "-y", "40"]);
    tmux.wait_for("the view again", |p| p.contains("sites by live bytes"));
    // Enter shows the selected site's stack, with the function that called it.
    tmux.cmd(&["send-keys", "-t", "top", "Enter"]);
    let pane = tmux.wait_for("the stack", |p| p.contains("stack (Enter or Esc: back)"));
    assert!(pane.contains("scenario_grow"), "{pane}");
    // In 16 rows the stack's box holds 2 lines: the site's, and how many more follow; Down
    // scrolls to the frames.
    tmux.cmd(&["resize-window", "-t", "top", "-x", "80", "-y", "16"]);
    let pane = tmux.wait_for("the stack's more line", |p| p.contains(" more lines (↓ to scroll)"));
    assert!(pane.contains("stack (Enter or Esc: back; Up/Down: scroll)"), "{pane}");
    let more = |p: &str| -> Option<usize> { p.split("… ").nth(1)?.split(' ').next()?.parse().ok() };
    let before = more(&pane).unwrap_or_else(|| panic!("{pane}"));
    tmux.cmd(&["send-keys", "-t", "top", "Down"]);
    let pane = tmux.wait_for("the stack scrolled", |p| more(p).is_some_and(|n| n + 1 == before) || before == 1);
    assert!(!pane.contains("│site "), "scrolled past the site's line: {pane}");
    tmux.cmd(&["resize-window", "-t", "top", "-x", "150", "-y", "40"]);
    tmux.cmd(&["send-keys", "-t", "top", "Escape"]);
    tmux.wait_for("the table again", |p| p.contains("sites by live bytes"));
    // `d` with no snapshot taken yet: it writes the first and says so.
    tmux.cmd(&["send-keys", "-t", "top", "d"]);
    let pane = tmux.wait_for("the first snapshot's path", |p| p.contains("first snapshot written to "));
    let path = pane.split("first snapshot written to ").nth(1).unwrap().split(';').next().unwrap();
    assert!(Path::new(path).is_file(), "{path}: {pane}");
    assert!(path.starts_with(dir.to_str().unwrap()) && path.ends_with("-snapshot-top-1.json"), "{path}");
    assert!(pane.contains("press d again to see what changes from it"), "{pane}");
    // `d` again: another snapshot, and what grew since the first.
    tmux.cmd(&["send-keys", "-t", "top", "d"]);
    let pane = tmux.wait_for("the diff", |p| p.contains("what changed since the last snapshot"));
    assert!(pane.contains("grow_step"), "{pane}");
    assert!(pane.contains("snapshot 1 \"top\"") && pane.contains("snapshot 2 \"top\""), "{pane}");
    // In 100 columns the diff's line of the site (about 150 characters) wraps: its end, the
    // site's file and line, is still shown.
    tmux.cmd(&["resize-window", "-t", "top", "-x", "100", "-y", "40"]);
    tmux.wait_for("the diff wrapped in 100 columns", |p| p.contains("programs/target_tracing.c:2"));
    tmux.cmd(&["resize-window", "-t", "top", "-x", "150", "-y", "40"]);
    tmux.cmd(&["send-keys", "-t", "top", "Escape"]);
    tmux.wait_for("the table again", |p| p.contains("sites by live bytes"));
    // `s`: a third snapshot, its path shown.
    tmux.cmd(&["send-keys", "-t", "top", "s"]);
    let pane = tmux.wait_for("the snapshot's path", |p| p.contains("-snapshot-top-3.json"));
    let path = pane.split("snapshot written to ").nth(1).unwrap().split_whitespace().next().unwrap();
    assert!(Path::new(path).is_file() && path.ends_with("-snapshot-top-3.json"), "{path}: {pane}");
    tmux.cmd(&["send-keys", "-t", "top", "q"]);
    let alt = || {
        String::from_utf8_lossy(&tmux.cmd(&["display", "-p", "-t", "top", "#{alternate_on}"]).stdout).trim().to_string()
    };
    until("the view's end", || (alt() == "0").then_some(()));
    let pane = tmux.wait_for("the prompt back", |p| p.trim_end().ends_with("READY$"));
    assert!(!pane.contains("sites by"), "{pane}");
    // The program (gpushim run's child) ends; `run` then ends with it.
    kill_below(live.pid);
    let _ = live.wait_exit();
}

/// Every process below `pid`, killed (the test's programs wait for their stdin to end).
fn kill_below(pid: i32) {
    let children = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", pid)).unwrap_or_default();
    for c in children.split_whitespace().filter_map(|c| c.parse::<i32>().ok()) {
        kill_below(c);
        signal(c, libc::SIGKILL);
    }
}

/// `gpushim top` on `gpushim run`'s pid with two traced processes (rank 0 leaking, rank 1
/// holding one buffer, its second 100 s away): one row per process, rank 0's naming its suspect with its rate within
/// 10%, rank 1's none; `--json` gives both frames, the output directory names the same job;
/// under tmux, the rows, Enter into a process
/// and Esc back.
#[test]
fn a_job_shows_one_row_per_process_and_the_leaking_ones_suspect() {
    let dir = TempDir::new("top-job");
    let (size, every) = (SIZE.to_string(), EVERY_MS.to_string());
    let launcher = "RANK=0 \"$0\" grow 4000 \"$1\" \"$2\" & RANK=1 \"$0\" grow 2 \"$1\" 100000 & wait";
    let mut run = Command::new(collector());
    run.arg("run").arg("-o").arg(dir.path()).args(["--", "sh", "-c", launcher]);
    run.arg(standin("target_dynamic")).args([&size, &every]);
    run.env("LD_LIBRARY_PATH", standins()).env_remove("LD_PRELOAD").env_remove("GPUSHIM_OUTPUT");
    let live = Live::spawn(run, "gpushim run -- sh -c 'two ranks of target_dynamic grow'".into());
    let pid = live.pid.to_string();
    let text = until("a row per process, covering the window", || {
        let out = top(&["top", &pid, "--once", "--window", WINDOW]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let ready = text.contains("2 traced processes")
            && text.lines().any(|l| l.starts_with("rank 0") && l.contains("grow_step"))
            && serde_json::from_slice::<Value>(&top(&["top", &pid, "--json", "--window", WINDOW]).stdout)
                .ok()
                .and_then(|v| v["frames"][0]["window_covered_s"].as_f64())
                .is_some_and(|c| c >= 2.9);
        ready.then_some(text)
    });
    let rank0 = text.lines().find(|l| l.starts_with("rank 0")).unwrap();
    let rank1 = text.lines().find(|l| l.starts_with("rank 1")).unwrap_or_else(|| panic!("{text}"));
    assert!(!rank1.contains("grow_step"), "{text}");
    let cells: Vec<&str> = rank1.split("  ").map(str::trim).filter(|c| !c.is_empty()).collect();
    assert_eq!(cells[4], "0", "rank 1 has no suspect: {text}");
    // The suspect's rate, in brackets after its headline.
    let rate = rank0.rsplit_once('(').unwrap().1.trim_end_matches(')');
    assert!(within_10_percent(parse_rate(rate)), "{rate}: {text}");
    let v: Value = serde_json::from_slice(&top(&["top", &pid, "--json"]).stdout).unwrap();
    assert_eq!(v["format"].as_str(), Some("gpushim-top-job"), "{v:#}");
    let mut ranks: Vec<i64> = v["frames"].as_array().unwrap().iter().map(|f| f["rank"].as_i64().unwrap()).collect();
    ranks.sort();
    assert_eq!(ranks, [0, 1]);
    // The same job by its output directory.
    let out = top(&["top", dir.path().to_str().unwrap(), "--once"]);
    let by_dir = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(by_dir.starts_with(&format!("{}: 2 traced processes", dir.path().display())), "{by_dir}");
    let out = top(&["top", "/nonexistent-gpushim-dir", "--once"]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!((out.status.code(), err.lines().count()), (Some(2), 1), "{err}");
    assert!(err.contains("neither a process id nor a directory"), "{err}");
    // `gpushim snapshot` of the launcher's pid: a snapshot of each traced process (it followed
    // the shell, which has the shim loaded but no collector, and said it had none).
    let out = top(&["snapshot", &pid]);
    let (stdout, err) = (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}{err}");
    let paths: Vec<&str> = stdout.lines().collect();
    assert_eq!(paths.len(), 2, "{stdout}{err}");
    assert!(paths.iter().all(|p| p.contains("-snapshot-1") && Path::new(p).is_file()), "{stdout}");
    assert!(err.contains("runs 2 traced processes"), "{err}");
    // The full-screen view: the job's rows first, Enter into a process, Esc back, q out.
    if Command::new("tmux").arg("-V").output().is_ok() {
        let tmux = Tmux(format!("gpushim-test-job-{}", std::process::id()));
        let out = tmux.cmd(&["new-session", "-d", "-s", "top", "-x", "150", "-y", "40", "env PS1=READY$ sh"]);
        assert!(out.status.success(), "tmux: {}", String::from_utf8_lossy(&out.stderr));
        tmux.wait_for("the shell's prompt", |p| p.contains("READY$"));
        tmux.cmd(&["send-keys", "-t", "top", &format!("{} top {pid}", collector().display()), "Enter"]);
        let pane = tmux.wait_for("a row per process", |p| {
            p.contains("2 traced processes") && p.lines().any(|l| l.contains("rank 0") && l.contains("grow_step"))
        });
        assert!(pane.lines().any(|l| l.contains("rank 1")), "{pane}");
        tmux.cmd(&["send-keys", "-t", "top", "Enter"]);
        tmux.wait_for("one process's sites", |p| p.contains("sites by live bytes") && p.contains(" rank "));
        tmux.cmd(&["send-keys", "-t", "top", "Escape"]);
        tmux.wait_for("the job's rows again", |p| p.contains("2 traced processes"));
        tmux.cmd(&["send-keys", "-t", "top", "q"]);
        tmux.wait_for("the prompt back", |p| p.trim_end().ends_with("READY$"));
    } else {
        eprintln!("SKIPPED the job's full-screen view: tmux is not installed (apt-get install tmux)");
    }
    kill_below(live.pid);
    let _ = live.wait_exit();
}

/// The site detail (Enter) says who held the site's memory at the latest snapshot's heap walk:
/// a Python program keeping eight buffers in a global list, a snapshot, then the frame.
#[test]
fn a_sites_detail_names_its_holders_from_the_latest_snapshot() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs/top_holders.py");
    let cudart = standin("libcudart.so.13");
    let t = Target::new(crate::python::python3(), "top-holders")
        .args(&[script.to_str().unwrap(), cudart.to_str().unwrap()])
        .env("PYTHONDONTWRITEBYTECODE", "1");
    let mut live = Live::start(&t);
    assert_eq!(live.line(), "ready");
    let pid = live.pid;
    // Before any snapshot: no holders.
    let f = until("the control socket", || try_ask(pid, "frame"));
    assert!(f["holders_from"].is_null(), "{f:#}");
    take_snapshot(pid);
    let (f, site) = until("a frame with the snapshot's holders", || {
        let f = ask(pid, "frame");
        let site = f["sites"].as_array()?.iter().find(|s| s["held_by"].is_array())?.clone();
        Some((f, site))
    });
    assert_eq!(f["holders_from"], "snapshot 1", "{f:#}");
    let held: Vec<&str> = site["held_by"].as_array().unwrap().iter().map(|l| l.as_str().unwrap()).collect();
    assert_eq!(site["live_bytes"], 8 * 64 * 1024, "{f:#}");
    assert!(
        held.iter().any(|l| l.starts_with("held by: programs/top_holders.py global 'kept' → list[*] → 8 objects")),
        "{held:#?}"
    );
    let d = live.finish();
    assert!(d.status.success(), "{d}");
}

/// One line of a Python program allocating through two native stacks in turn
/// (tests/programs/top_one_line.py: the stand-in cudaMalloc and cudaMallocPitch): the frame
/// gives one row of both sites, a suspect, with their bytes summed, and counts one suspect;
/// `--once` shows the row once with its sites; the final report has the one suspect too,
/// across the same two sites of one line.
#[test]
fn the_sites_of_one_line_are_one_row_as_in_the_report() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs/top_one_line.py");
    let cudart = standin("libcudart.so.13");
    let t = Target::new(crate::python::python3(), "top-one-line")
        .args(&[script.to_str().unwrap(), cudart.to_str().unwrap()])
        .env("PYTHONDONTWRITEBYTECODE", "1");
    let dir = t.dir.path().to_path_buf();
    let mut live = Live::start(&t);
    assert_eq!(live.line(), "ready");
    let pid = live.pid.to_string();
    let ours = |row: &&Value| row["headline"].as_str().is_some_and(|h| h.contains("top_one_line.py"));
    let f = until("a suspect row of two sites", || {
        let out = top(&["top", &pid, "--json"]);
        let f: Value = serde_json::from_slice(&out.stdout).ok()?;
        let row = f["sites"].as_array()?.iter().find(ours)?;
        (row["suspect"] == true && row["sites"].as_array()?.len() == 2).then_some(f)
    });
    assert_eq!(f["version"], 2, "{f:#}");
    let rows: Vec<&Value> = f["sites"].as_array().unwrap().iter().filter(ours).collect();
    assert_eq!(rows.len(), 1, "{f:#}");
    assert_eq!(f["suspects"], 1, "{f:#}");
    let row = rows[0];
    let (bytes, count) = (row["live_bytes"].as_u64().unwrap(), row["live_count"].as_u64().unwrap());
    assert_eq!(bytes, count * (64 << 10), "both sites' 64 KiB buffers: {f:#}");
    assert_eq!(row["id"], row["sites"][0], "{f:#}");
    let mut sites: Vec<u64> =
        row["sites"].as_array().unwrap().iter().map(|s| s.as_str().unwrap().parse().unwrap()).collect();
    sites.sort_unstable();

    let once = top(&["top", &pid, "--once"]);
    let text = String::from_utf8_lossy(&once.stdout).into_owned();
    assert!(once.status.success(), "{text}{}", String::from_utf8_lossy(&once.stderr));
    // Two sites live, one row: the line says both.
    assert_eq!((f["sites_live"].as_u64(), f["rows_live"].as_u64()), (Some(2), Some(1)), "{f:#}");
    assert!(
        text.lines().nth(3).is_some_and(|l| l
            .starts_with("2 sites live in 1 row (sites of one line are one row), 1 suspect; growth over the last ")),
        "{text}"
    );
    // The rows, below the header's five lines (the first names the script too).
    let ours: Vec<&str> = text.lines().skip(5).filter(|l| l.contains("top_one_line.py")).collect();
    assert_eq!(ours.len(), 1, "{text}");
    assert!(
        ours[0].ends_with(&format!(
            "(sites {})",
            row["sites"].as_array().unwrap().iter().map(|s| s.as_str().unwrap()).collect::<Vec<_>>().join(", ")
        )),
        "{text}"
    );

    let d = live.finish();
    assert!(d.status.success(), "{d}");
    let r = d.report_in(&dir);
    let suspects = r["suspects"].as_array().unwrap();
    assert_eq!(suspects.len(), 1, "{r:#}");
    assert!(suspects[0]["reason"].as_str().unwrap().contains("across 2 sites of one line"), "{r:#}");
    let mut in_report: Vec<u64> =
        suspects[0]["sites"].as_array().unwrap().iter().map(|s| s.as_u64().unwrap()).collect();
    in_report.sort_unstable();
    assert_eq!(in_report, sites, "{r:#}");
}
