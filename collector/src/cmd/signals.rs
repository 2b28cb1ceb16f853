//! Signal dispositions of `gpushim` itself: what `run` ignores while the program runs (and
//! puts back in the program), and what `collect` ignores so that the report is always written.

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
