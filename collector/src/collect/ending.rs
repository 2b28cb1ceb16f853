//! How the program's stream ended, as far as the collector can tell: a stop signal that
//! reached the collector while the stream was open (a scheduler's stop sends SIGTERM to every
//! process of the job, the collector included), and whether the program still runs when its
//! stream ended without an exit event (it closed the shim's socket) or is gone (killed).

use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicI32, Ordering::SeqCst};

/// The first stop signal the collector received (0: none). Set by `gpushim collect`'s signal
/// handler, which ignores the signal otherwise: the report is finished first. It counts for
/// the report when it came before the stream's end was read (the exit event, or the end of a
/// stream without one): the program's exit waits until its stream is read, and a signal
/// interrupts the collector's read before it reads on, so a signal sent before the program
/// ended its stream is seen, and one sent after it exited is not.
pub struct Stop(AtomicI32);

/// The collector's one [`Stop`].
pub static STOP: Stop = Stop(AtomicI32::new(0));

impl Stop {
    /// Records `sig`, if no signal was before. Async-signal-safe (one atomic).
    pub fn record(&self, sig: i32) {
        let _ = self.0.compare_exchange(0, sig, SeqCst, SeqCst);
    }

    /// The signal received so far, if any.
    pub(super) fn now(&self) -> Option<i32> {
        Some(self.0.load(SeqCst)).filter(|&s| s != 0)
    }
}

/// The name of a stop signal for reports.
pub fn signal_name(sig: i32) -> String {
    match sig {
        libc::SIGTERM => "SIGTERM".into(),
        libc::SIGHUP => "SIGHUP".into(),
        libc::SIGINT => "SIGINT".into(),
        libc::SIGQUIT => "SIGQUIT".into(),
        n => format!("signal {n}"),
    }
}

/// The program, watched through a pidfd opened while its stream is open (so the pid is its).
pub(super) struct Watch(Option<OwnedFd>, u32);

impl Watch {
    /// Watches `pid`; `live` false (a recorded stream) or no pidfd: nothing is known.
    pub(super) fn open(pid: u32, live: bool) -> Watch {
        if !live {
            return Watch(None, pid);
        }
        // SAFETY: pidfd_open takes a pid and flags, returns a new descriptor or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) } as i32;
        // SAFETY: a descriptor just returned to us, owned from here on.
        Watch((fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) }), pid)
    }

    /// Whether the program runs on, neither gone nor exiting, now that its stream ended
    /// without an exit event; `None` when it is not watched. A killed process is marked
    /// exiting (`PF_EXITING`) before its descriptors close, so at the end of its stream it is
    /// never taken for one that runs on.
    pub(super) fn runs_on(&self) -> Option<bool> {
        use std::os::fd::AsRawFd;
        let fd = self.0.as_ref()?.as_raw_fd();
        let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd, no wait; a pidfd is readable once the process has ended.
        if unsafe { libc::poll(&mut p, 1, 0) } != 0 {
            return Some(false);
        }
        // The pidfd is not readable: the pid is still the program's.
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.1)).ok()?;
        // Fields after the command's closing parenthesis: state (3), ..., flags (9).
        let rest: Vec<&str> = stat.get(stat.rfind(')')? + 1..)?.split_whitespace().collect();
        let state = *rest.first()?;
        let flags: u64 = rest.get(6)?.parse().ok()?;
        const PF_EXITING: u64 = 0x4;
        Some(!matches!(state, "Z" | "X" | "x") && flags & PF_EXITING == 0)
    }

    /// The stop signal (SIGTERM, SIGHUP or SIGINT) that ended the program, when its stream
    /// ended without an exit event and it is a zombie not yet reaped: the exit status its
    /// parent will read (`/proc/PID/stat`'s `exit_code`, field 52). A terminal's Ctrl-C reaches
    /// the program's process group, not the collector's. `gpushim run` reaps the program only
    /// after its collector is done; under another parent that reaps first, nothing is known.
    /// Called for a program that is exiting: its stream closes before it is a zombie, so this
    /// waits up to [`ZOMBIE_WAIT_MS`] for that.
    pub(super) fn stop_signal(&self) -> Option<i32> {
        use std::os::fd::AsRawFd;
        let fd = self.0.as_ref()?.as_raw_fd();
        let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd. Readable: the program has ended, so a zombie at its pid is
        // the program (its pid cannot be reused before it is reaped).
        if unsafe { libc::poll(&mut p, 1, ZOMBIE_WAIT_MS) } <= 0 {
            return None;
        }
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.1)).ok()?;
        stop_signal_of(&stat)
    }
}

/// Longest wait for an exiting program to become a zombie, ms.
const ZOMBIE_WAIT_MS: i32 = 500;

/// The stop signal a zombie's `/proc/PID/stat` says it died of (its state `Z`, its `exit_code`
/// a wait status with the signal in the low 7 bits).
fn stop_signal_of(stat: &str) -> Option<i32> {
    // Fields after the command's closing parenthesis: state (3), ..., exit_code (52).
    let rest: Vec<&str> = stat.get(stat.rfind(')')? + 1..)?.split_whitespace().collect();
    if *rest.first()? != "Z" {
        return None;
    }
    let code: i32 = rest.get(49)?.parse().ok()?;
    let sig = code & 0x7f;
    [libc::SIGTERM, libc::SIGHUP, libc::SIGINT].contains(&sig).then_some(sig)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zombie_killed_by_a_stop_signal_says_which() {
        let stat = |state: &str, code: i32| {
            let mut f: Vec<String> = (4..=51).map(|i| i.to_string()).collect();
            f.push(code.to_string());
            format!("4242 (py (x)) {state} {}", f.join(" "))
        };
        assert_eq!(stop_signal_of(&stat("Z", libc::SIGINT)), Some(libc::SIGINT));
        assert_eq!(stop_signal_of(&stat("Z", libc::SIGTERM | 0x80)), Some(libc::SIGTERM), "with a core dump bit");
        assert_eq!(stop_signal_of(&stat("Z", libc::SIGKILL)), None, "not a stop signal");
        assert_eq!(stop_signal_of(&stat("Z", 3 << 8)), None, "exited with status 3");
        assert_eq!(stop_signal_of(&stat("S", libc::SIGINT)), None, "not a zombie");
        assert_eq!(stop_signal_of("garbage"), None);
    }
}
