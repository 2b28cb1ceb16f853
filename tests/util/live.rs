//! A target started with pipes, for tests that act on it while it runs (`Live` → `Done`). Every
//! wait is bounded by [`DEADLINE`]: a failure, never a hang.

use std::fmt;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{read_json, Target};

/// Upper bound of any one wait in these tests (a failure, not a pause).
pub const DEADLINE: Duration = Duration::from_secs(90);

/// A running target. stdout is read line by line, stderr to its end, and the exit is awaited,
/// each on its own thread, so every wait can be bounded.
pub struct Live {
    desc: String,
    pub pid: i32,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<Option<String>>,
    seen: Vec<String>,
    exited: mpsc::Receiver<ExitStatus>,
    stderr: mpsc::Receiver<String>,
}

/// A finished `Live` run.
pub struct Done {
    desc: String,
    pub status: ExitStatus,
    pub stdout: Vec<String>,
    pub stderr: String,
}

impl fmt::Display for Done {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "\n--- command\n{}\n--- status\n{:?}\n--- stdout\n{}\n--- stderr\n{}",
            self.desc,
            self.status,
            self.stdout.join("\n"),
            self.stderr
        )
    }
}

impl Live {
    pub fn start(t: &Target) -> Live {
        Live::spawn(t.command(), t.describe())
    }

    pub fn spawn(mut cmd: Command, desc: String) -> Live {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {desc}: {e}"));
        let pid = child.id() as i32;
        let stdin = child.stdin.take();
        let out = child.stdout.take().unwrap();
        let err = child.stderr.take().unwrap();
        let (ltx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines() {
                let Ok(l) = l else { break };
                if ltx.send(Some(l)).is_err() {
                    return;
                }
            }
            let _ = ltx.send(None);
        });
        let (etx, stderr) = mpsc::channel();
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = BufReader::new(err).read_to_string(&mut s);
            let _ = etx.send(s);
        });
        let (xtx, exited) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = xtx.send(child.wait().expect("waiting for the target"));
        });
        Live { desc, pid, stdin, lines, seen: Vec::new(), exited, stderr }
    }

    /// Kills the target (it would otherwise outlive the test) and fails.
    pub fn abort(&self, why: &str) -> ! {
        // SAFETY: signalling our own child by pid.
        unsafe { libc::kill(self.pid, libc::SIGKILL) };
        panic!("{why}\n--- command\n{}\n--- stdout so far\n{}", self.desc, self.seen.join("\n"));
    }

    /// The next line of stdout.
    pub fn line(&mut self) -> String {
        match self.lines.recv_timeout(DEADLINE) {
            Ok(Some(l)) => {
                self.seen.push(l.clone());
                l
            }
            Ok(None) => self.abort("stdout ended where a line was expected"),
            Err(_) => self.abort("no line on stdout before the deadline"),
        }
    }

    pub fn close_stdin(&mut self) {
        self.stdin.take();
    }

    /// Waits for the target to exit.
    pub fn wait_exit(&self) -> ExitStatus {
        match self.exited.recv_timeout(DEADLINE) {
            Ok(s) => s,
            Err(_) => self.abort("the program did not exit before the deadline"),
        }
    }

    /// Closes stdin, waits for the exit, then for stdout and stderr to end: the collector
    /// inherits both and holds them until its report is written.
    pub fn finish(mut self) -> Done {
        self.close_stdin();
        let status = self.wait_exit();
        self.finish_after(status)
    }

    /// After [`Live::wait_exit`]: waits for stdout and stderr to end.
    pub fn finish_after(mut self, status: ExitStatus) -> Done {
        let deadline = Instant::now() + DEADLINE;
        loop {
            match self.lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(Some(l)) => self.seen.push(l),
                Ok(None) => break,
                Err(_) => panic!("stdout never ended (a collector still running?)\n{}", self.desc),
            }
        }
        let stderr = self
            .stderr
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .unwrap_or_else(|_| panic!("stderr never ended (a collector still running?)\n{}", self.desc));
        Done { desc: self.desc, status, stdout: self.seen, stderr }
    }
}

impl Done {
    /// The target's pid, from the collector's summary line on stderr.
    pub fn pid(&self) -> u32 {
        self.stderr
            .lines()
            .find_map(|l| l.strip_prefix("gpushim: pid ")?.split(' ').next()?.parse().ok())
            .unwrap_or_else(|| panic!("no summary line{self}"))
    }

    /// The final report in `dir` of the process the summary line names.
    pub fn report_in(&self, dir: &Path) -> Value {
        read_json(&dir.join(format!("gpushim-{}.json", self.pid())), self)
    }

    pub fn stderr_lines(&self) -> Vec<&str> {
        self.stderr.lines().collect()
    }
}

/// Runs `t` to the end with stdin closed, bounded by [`DEADLINE`].
pub fn run_bounded(t: &Target) -> Done {
    Live::start(t).finish()
}

/// The program's stdout without the shim (same arguments, stdin closed).
pub fn plain_stdout(program: &str, args: &[&str]) -> Vec<String> {
    let t = Target::new(program, "plain").args(args).preload(None);
    let d = run_bounded(&t);
    assert!(d.status.success(), "the program fails even without the shim{d}");
    assert_eq!(d.stderr, "", "{d}");
    d.stdout
}
