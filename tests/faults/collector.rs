//! The collector failing: killed mid-run, not executable or exiting at once, stopped (the exit is
//! delayed by at most GPUSHIM_EXIT_TIMEOUT, also with threads waiting in their hooks), and not
//! reading at all (the shim's memory stays bounded).

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::util::*;

#[test]
fn collector_killed_mid_run_leaves_the_program_unharmed_with_one_warning() {
    // 20,000 alloc/free pairs after the kill: far more bytes than a socket buffer holds, so
    // the writer meets the closed socket.
    let args = ["pause", "20000"];
    let plain = plain_stdout("target_dynamic", &args);
    let t = Target::new("target_dynamic", "collector-killed").args(&args);
    let mut live = Live::start(&t);
    assert_eq!(live.line(), "ready");
    let c = the_collector(t.dir.path());
    signal(c, libc::SIGKILL);
    assert!(wait_gone(c, DEADLINE), "the collector {c} survived SIGKILL");
    let d = live.finish();
    assert!(d.status.success(), "{d}");
    assert_eq!(d.stdout, plain, "the program's output is what it is without the shim{d}");
    let err = d.stderr_lines();
    assert_eq!(err.len(), 1, "exactly one line on stderr{d}");
    assert!(err[0].starts_with("gpushim: lost the collector ("), "{d}");
    assert!(err[0].ends_with("the program goes on unrecorded"), "{d}");
    assert!(names_in(t.dir.path()).is_empty(), "a killed collector writes nothing{d}");
}

#[test]
fn collector_not_executable_or_exiting_at_once_leaves_the_program_unharmed_with_one_warning() {
    let args = ["pause", "1000"];
    let plain = plain_stdout("target_dynamic", &args);
    let bin = TempDir::new("noexec");
    let noexec = bin.path().join("gpushim");
    fs::write(&noexec, "#!/bin/sh\nexit 0\n").unwrap();
    fs::set_permissions(&noexec, fs::Permissions::from_mode(0o644)).unwrap();
    // Not executable (root too needs one x bit to exec), and a collector that exits at once
    // without reading (the socket closes before or after the events are sent: either way one
    // line).
    for (collector, first) in [
        (noexec.display().to_string(), format!("gpushim: cannot start the collector '{}': ", noexec.display())),
        ("/bin/false".to_string(), "gpushim: ".to_string()),
    ] {
        let t = Target::new("target_dynamic", "collector-bad").args(&args).env("GPUSHIM_COLLECTOR", &collector);
        let d = run_bounded(&t);
        assert!(d.status.success(), "{d}");
        assert_eq!(d.stdout, plain, "{d}");
        let err = d.stderr_lines();
        assert_eq!(err.len(), 1, "exactly one line on stderr{d}");
        assert!(err[0].starts_with(&first) && err[0].contains("collector"), "{d}");
        assert!(names_in(t.dir.path()).is_empty(), "{d}");
    }
}

#[test]
fn stalled_collector_delays_exit_by_at_most_gpushim_exit_timeout() {
    let t = Target::new("target_dynamic", "stalled-exit").args(&["pause", "0"]).env("GPUSHIM_EXIT_TIMEOUT", 2);
    let mut live = Live::start(&t);
    assert_eq!(live.line(), "ready");
    let c = the_collector(t.dir.path());
    let stopped = Stopped::new(c);
    let t0 = Instant::now();
    live.close_stdin();
    let status = live.wait_exit();
    let took = t0.elapsed();
    drop(stopped);
    let d = live.finish_after(status);
    assert!(d.status.success(), "{d}");
    assert_eq!(d.stdout, ["ready", "ok"], "{d}");
    assert!(took >= Duration::from_millis(1900), "the exit path waits for the collector (took {took:?}){d}");
    assert!(took < Duration::from_secs(30), "…but not longer than GPUSHIM_EXIT_TIMEOUT (took {took:?}){d}");
    // One line says the report will be late, and where it will appear.
    let late: Vec<&str> = d.stderr.lines().filter(|l| l.contains("the report will be late")).collect();
    let path = t.dir.path().join(format!("gpushim-{}.json", d.pid()));
    assert_eq!(
        late,
        [format!(
            "gpushim: the collector has not finished after 2 s (GPUSHIM_EXIT_TIMEOUT); the report will be late: {} \
             when it finishes (else in $TMPDIR)",
            path.display()
        )],
        "{d}"
    );
    // Once it runs again, the collector still writes the whole report.
    let r = d.report_in(t.dir.path());
    assert_eq!(r["reason"], "exit", "{d}");
    assert_eq!(total(&r, "live_bytes"), 3 * MIB, "{d}");
}

/// The thread whose allocations a collector that does not read holds up.
#[derive(Clone, Copy)]
enum Allocating {
    /// The main thread.
    Main,
    /// The one thread that is neither the main thread nor the shim's writer.
    Other,
}

/// Waits until the collector's not reading holds the program up: the socket is full (the
/// writer thread sleeps in sendto) and so is the channel (the `allocating` thread sleeps in
/// futex inside its hook). There is no event to wait on, so /proc is polled against the
/// deadline; the state must hold for 5 polls in a row. Returns when it was first seen.
///
/// The threads are looked up at each poll: the writer names itself only once it runs, and
/// until then it cannot be told from the program's own threads.
fn wait_held_up(live: &Live, allocating: Allocating) -> Instant {
    let pid = live.pid;
    let deadline = Instant::now() + DEADLINE;
    let mut streak = 0;
    let mut since = Instant::now();
    while streak < 5 {
        let held = writer_thread(pid).is_some_and(|w| {
            let tid = match allocating {
                Allocating::Main => Some(pid),
                Allocating::Other => other_thread(pid, w),
            };
            asleep_in(pid, w, libc::SYS_sendto) && tid.is_some_and(|t| asleep_in(pid, t, libc::SYS_futex))
        });
        if held {
            if streak == 0 {
                since = Instant::now();
            }
            streak += 1;
        } else {
            streak = 0;
        }
        if Instant::now() > deadline {
            live.abort("the program never waited for the collector: is the channel still bounded?");
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    since
}

/// Runs `t` (the `stuck-exit` scenario) with its collector stopped once a thread is held up in
/// its hook, then lets it exit: how long the exit took, and the run, checked to have succeeded
/// with its output unchanged.
fn exit_with_the_collector_stopped(t: &Target) -> (Duration, Done) {
    let mut live = Live::start(t);
    assert_eq!(live.line(), "ready");
    let stopped = Stopped::new(the_collector(t.dir.path()));
    wait_held_up(&live, Allocating::Other);
    let t0 = Instant::now();
    live.close_stdin();
    let status = live.wait_exit();
    let took = t0.elapsed();
    drop(stopped);
    let d = live.finish_after(status);
    assert!(d.status.success(), "{d}");
    assert_eq!(d.stdout, ["ready", "ok"], "{d}");
    (took, d)
}

#[test]
fn exit_is_not_held_up_by_threads_blocked_on_a_stalled_collector() {
    // The collector stops reading while a thread allocates: the channel fills and that thread
    // waits in its hook. The program then exits: the exit path must not wait for room in the
    // channel longer than GPUSHIM_EXIT_TIMEOUT.
    let t = Target::new("target_dynamic", "stuck-exit").args(&["stuck-exit"]).env("GPUSHIM_EXIT_TIMEOUT", 2);
    let (took, d) = exit_with_the_collector_stopped(&t);
    assert!(took < Duration::from_secs(30), "the exit took {took:?}{d}");
    // The collector, running again, reports what it received (the program ended without its
    // exit event being queued).
    let r = d.report_in(t.dir.path());
    assert_eq!(r["reason"], "killed", "{d}");
    assert!(total(&r, "live_bytes") >= MIB, "{d}");
}

#[test]
fn the_exits_scan_and_the_exit_path_share_one_gpushim_exit_timeout() {
    // The exit's reachability scan, asked for when `main` returns (before the exit handlers),
    // waits for a writer that a stopped collector holds up; the exit path after it waited the
    // whole GPUSHIM_EXIT_TIMEOUT again: 6.0 s for a timeout of 3 s (3.2 s with the scans off).
    // The two waits share the one timeout.
    let timeout = 5;
    let t = Target::new("target_dynamic", "stuck-exit-scan").args(&["stuck-exit"]).env("GPUSHIM_EXIT_TIMEOUT", timeout);
    let (took, d) = exit_with_the_collector_stopped(&t);
    assert!(
        took < Duration::from_millis(timeout * 1000 + 3000),
        "the exit waited {took:?}, past GPUSHIM_EXIT_TIMEOUT={timeout} s{d}"
    );
}

/// Alloc/free pairs of the slow-collector test: 2 events each. 5,000,000 pairs (10 million
/// events) take 17 to 30 s on the 2-core CI machine in a debug build; see docs/guarantees.md.
const CHURN_PAIRS: u64 = 5_000_000;
/// Growth of the target's resident memory allowed over its size at the first event, KiB.
/// What a full pipeline holds: 16,384 queued events (the channel's slots are allocated when
/// tracing starts, so only each event's boxed backtrace, under 100 bytes here, is new:
/// about 1.6 MiB) plus the writer's 64 KiB buffer; 16 MiB leaves room for allocator slack.
/// An unbounded queue would need over 1 GiB for these 10 million events.
const RSS_GROWTH_BOUND_KB: u64 = 16 * 1024;

/// A FIFO that the slow collector reads one line from before it reads its stream. Opened when
/// dropped too, so that a failing test leaves no collector waiting on it.
struct Gate(PathBuf);

impl Gate {
    fn new(path: PathBuf) -> Gate {
        let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo: {}", std::io::Error::last_os_error());
        Gate(path)
    }

    /// Lets the collector through (waits until it opens its end, which it does at start).
    fn open(&self) {
        fs::OpenOptions::new().write(true).open(&self.0).and_then(|mut g| g.write_all(b"go\n")).unwrap();
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        use std::os::unix::fs::OpenOptionsExt;
        // Without blocking: fails at once if nobody waits on it.
        let _ = fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&self.0)
            .and_then(|mut g| g.write_all(b"go\n"));
    }
}

#[test]
fn shim_memory_stays_bounded_while_the_collector_does_not_read() {
    let dir = TempDir::new("slow-collector");
    let gate = Gate::new(dir.path().join("gate"));
    // A collector that reads nothing until the test opens the gate, then everything.
    let slow =
        script(dir.path(), "slow-collector", "#!/bin/sh\nread -r _ < \"$GPUSHIM_TEST_GATE\"\nexec cat > /dev/null\n");
    let t = Target::new("target_dynamic", "slow-collector")
        .args(&["churn", &CHURN_PAIRS.to_string()])
        .env("GPUSHIM_COLLECTOR", slow.display())
        .env("GPUSHIM_TEST_GATE", gate.0.display());
    let mut live = Live::start(&t);
    let ready = live.line();
    let start_kb: u64 = ready.strip_prefix("ready ").and_then(|v| v.parse().ok()).unwrap_or_else(|| live.abort(&ready));
    let pid = live.pid;
    let held_since = wait_held_up(&live, Allocating::Main);
    let held_kb = status_kb(pid, "VmRSS:");
    let held_for = held_since.elapsed();
    // Open the gate: the collector drains everything.
    gate.open();
    let d = live.finish();
    assert!(d.status.success(), "{d}");
    let field = |name: &str| -> u64 {
        d.stdout
            .iter()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} line{d}"))
    };
    let (hwm_kb, slowest_us) = (field("vmhwm_kb"), field("slowest_pair_us"));
    eprintln!(
        "slow collector: {} events; RSS {start_kb} kB at the first event, {held_kb} kB while held up, peak {hwm_kb} kB; \
         slowest pair {slowest_us} us (held at least {held_for:?})",
        2 * CHURN_PAIRS
    );
    assert!(held_kb <= start_kb + RSS_GROWTH_BOUND_KB, "RSS {held_kb} kB while held, {start_kb} kB at start{d}");
    assert!(hwm_kb <= start_kb + RSS_GROWTH_BOUND_KB, "peak RSS {hwm_kb} kB, {start_kb} kB at start{d}");
    assert!(
        slowest_us as u128 >= held_for.as_micros(),
        "one pair waited while the collector read nothing ({slowest_us} us < {held_for:?}){d}"
    );
}
