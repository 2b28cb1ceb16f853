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

/// For `gpushim collect` as spawned by the shim: keeps going (and writes the report) when the
/// terminal sends SIGINT, SIGQUIT or SIGHUP; the end of the event stream ends it.
pub(crate) fn ignore_interrupts() {
    ignore(&[libc::SIGINT, libc::SIGQUIT, libc::SIGHUP]);
}

/// The process [`forward`]'s handler passes signals to (0: none yet).
static FORWARD_TO: AtomicI32 = AtomicI32::new(0);

extern "C" fn pass_on(sig: libc::c_int) {
    let pid = FORWARD_TO.load(Relaxed);
    if pid > 0 {
        // SAFETY: kill is async-signal-safe; `pid` is our child, which we have not reaped yet
        // (the handler is only installed while we wait for it).
        unsafe { libc::kill(pid, sig) };
    }
}

/// For `gpushim run`: passes `sigs` received by `gpushim` on to `pid`, the program (`kill` to
/// `gpushim run`'s own pid would otherwise end the wrapper and leave the program running
/// unwatched, its exit status lost; a snapshot signal would not reach the shim).
pub(crate) fn forward(pid: i32, sigs: &[libc::c_int]) {
    FORWARD_TO.store(pid, Relaxed);
    for &sig in sigs {
        let mut sa = empty_sigaction();
        sa.sa_sigaction = pass_on as *const () as usize;
        sa.sa_flags = libc::SA_RESTART;
        // SAFETY: a valid sigaction whose handler only loads an atomic and calls kill.
        unsafe { libc::sigaction(sig, &sa, std::ptr::null_mut()) };
    }
}
