//! Signal dispositions of `gpushim` itself: what `run` ignores while the program runs (and
//! puts back in the program) and what it passes on to the program, and what `collect` ignores
//! so that the report is always written.

use std::sync::atomic::{AtomicI32, Ordering::Relaxed};

/// Signals with their dispositions from before [`ignore`] changed them.
pub(crate) type Saved = Vec<(libc::c_int, libc::sigaction)>;

/// Ignores the signals in `sigs`; returns what they were.
pub(crate) fn ignore(sigs: &[libc::c_int]) -> Saved {
    sigs.iter()
        .map(|&sig| {
            let mut ign = empty_sigaction();
            ign.sa_sigaction = libc::SIG_IGN;
            let mut old = empty_sigaction();
            // SAFETY: both pointers are to valid sigaction structs; `sig` is a valid signal.
            unsafe { libc::sigaction(sig, &ign, &mut old) };
            (sig, old)
        })
        .collect()
}

/// Puts back what [`ignore`] changed. Async-signal-safe (no allocation).
pub(crate) fn restore(saved: &Saved) {
    for (sig, old) in saved {
        // SAFETY: `old` is the valid disposition that sigaction returned for `sig`.
        unsafe { libc::sigaction(*sig, old, std::ptr::null_mut()) };
    }
}

fn empty_sigaction() -> libc::sigaction {
    // SAFETY: sigaction is a plain C struct for which all-zero bytes is a valid value
    // (SIG_DFL, no flags, empty mask).
    unsafe { std::mem::zeroed() }
}

/// For `gpushim collect`: past a file-size limit (`ulimit -f`) a write fails with EFBIG, which
/// the report writer handles (the next directory, then a clear error), instead of SIGXFSZ
/// ending the collector and leaving a partial temporary file behind.
pub(crate) fn ignore_file_size_signal() {
    ignore(&[libc::SIGXFSZ]);
}

/// For `gpushim collect` as spawned by the shim: keeps going (and writes the report) when a
/// scheduler's stop (SIGTERM to every process of the job: `systemctl stop`, `scancel`, a pod's
/// teardown) or the terminal (SIGINT, SIGQUIT, SIGHUP) reaches it; the end of the event stream
/// ends it. SIGTERM, SIGHUP and SIGINT are recorded ([`crate::collect::ending::STOP`]): the
/// report's reason says the program was stopped.
pub(crate) fn hold_stop_signals() {
    ignore(&[libc::SIGQUIT]);
    for sig in [libc::SIGTERM, libc::SIGHUP, libc::SIGINT] {
        let mut sa = empty_sigaction();
        sa.sa_sigaction = record_stop as *const () as usize;
        sa.sa_flags = libc::SA_RESTART;
        // SAFETY: a valid sigaction whose handler only stores atomics and reads the clock.
        unsafe { libc::sigaction(sig, &sa, std::ptr::null_mut()) };
    }
}

extern "C" fn record_stop(sig: libc::c_int) {
    crate::collect::ending::STOP.record(sig);
}

/// The process [`forward`]'s handler passes signals to (0: none yet).
static FORWARD_TO: AtomicI32 = AtomicI32::new(0);

/// Whether a signal that reached `gpushim run` was meant for it alone, so that the program
/// would not get it unless it is passed on: sent by a process (`kill`, `sigqueue`, `tkill`:
/// `si_code` SI_USER, SI_QUEUE or SI_TKILL) other than the program itself. A signal the
/// kernel raised (`si_code` SI_KERNEL: the terminal's Ctrl-C, Ctrl-\\ or hang-up, sent to the
/// whole foreground process group) has reached the program already, and a signal the program
/// sent (to its group, e.g. `kill(0, SIGTERM)`) is its own business. Async-signal-safe.
pub(crate) fn meant_for_the_wrapper(code: libc::c_int, sender: libc::pid_t, program: libc::pid_t) -> bool {
    matches!(code, libc::SI_USER | libc::SI_QUEUE | libc::SI_TKILL) && sender != program
}

extern "C" fn pass_on(sig: libc::c_int, info: *mut libc::siginfo_t, _context: *mut libc::c_void) {
    let pid = FORWARD_TO.load(Relaxed);
    if pid <= 0 || info.is_null() {
        return;
    }
    // SAFETY: for an SA_SIGINFO handler the kernel passes a valid siginfo; si_pid is the
    // sender's pid for the si_codes `meant_for_the_wrapper` accepts (and is only compared).
    let (code, sender) = unsafe { ((*info).si_code, (*info).si_pid()) };
    if meant_for_the_wrapper(code, sender, pid) {
        // SAFETY: kill is async-signal-safe; `pid` is our child, which we have not reaped yet
        // (the handler is only installed while we wait for it).
        unsafe { libc::kill(pid, sig) };
    }
}

/// For `gpushim run`: passes `sigs` sent to `gpushim run` alone on to `pid`, the program
/// (`kill` to `gpushim run`'s own pid would otherwise end the wrapper and leave the program
/// running unwatched, its exit status lost; a snapshot signal would not reach the shim). A
/// signal sent to the whole process group (the terminal's Ctrl-C) is not passed on: the
/// program got it already ([`meant_for_the_wrapper`]).
pub(crate) fn forward(pid: i32, sigs: &[libc::c_int]) {
    FORWARD_TO.store(pid, Relaxed);
    for &sig in sigs {
        let mut sa = empty_sigaction();
        sa.sa_sigaction = pass_on as *const () as usize;
        sa.sa_flags = libc::SA_RESTART | libc::SA_SIGINFO;
        // SAFETY: a valid sigaction whose handler only reads its siginfo, loads an atomic
        // and calls kill.
        unsafe { libc::sigaction(sig, &sa, std::ptr::null_mut()) };
    }
}

/// Blocks `sigs` in this thread (`gpushim run` has no other); returns the mask to give back to
/// [`unblock`]. A signal that arrives meanwhile stays pending, even one that is ignored.
pub(crate) fn block(sigs: &[libc::c_int]) -> libc::sigset_t {
    // SAFETY: sigset_t values filled by sigemptyset/sigaddset, and a valid out pointer.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for &sig in sigs {
            libc::sigaddset(&mut set, sig);
        }
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
        old
    }
}

/// Puts back the mask [`block`] returned: pending signals are delivered now.
pub(crate) fn unblock(old: &libc::sigset_t) {
    // SAFETY: `old` is a mask pthread_sigmask returned.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, old, std::ptr::null_mut()) };
}

/// For `gpushim run`, after the program died of `sig`: dies of the same signal, as `timeout(1)`
/// does, so that a shell sees a signal death (and e.g. stops a script on Ctrl-C). The
/// disposition goes back to the default, the signal is unblocked, and core dumps are turned off
/// first (the program's own core, if any, is the one that matters). Returns only if the
/// signal did not end this process (a signal whose default action is not to terminate).
pub(crate) fn die_of(sig: libc::c_int) {
    let mut dfl = empty_sigaction();
    dfl.sa_sigaction = libc::SIG_DFL;
    let no_core = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: plain calls with valid arguments: a default disposition, a one-signal set, a
    // zero rlimit (lowering a limit is always allowed).
    unsafe {
        libc::sigaction(sig, &dfl, std::ptr::null_mut());
        libc::setrlimit(libc::RLIMIT_CORE, &no_core);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::raise(sig);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_signals_sent_to_the_wrapper_alone_are_passed_on() {
        let program = 4321;
        assert!(meant_for_the_wrapper(libc::SI_USER, 99, program), "kill -TERM <pid of gpushim run>");
        assert!(meant_for_the_wrapper(libc::SI_QUEUE, 99, program));
        assert!(meant_for_the_wrapper(libc::SI_TKILL, 99, program));
        assert!(!meant_for_the_wrapper(libc::SI_KERNEL, 0, program), "the terminal's Ctrl-C to the group");
        assert!(!meant_for_the_wrapper(libc::SI_USER, program, program), "the program signalled its group");
    }
}
