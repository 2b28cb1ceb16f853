//! The shim never harms the program it watches. Whatever goes wrong on gpushim's side
//! (the collector killed, missing, stalled; the output directory unwritable; a file in the
//! report's way; signal bursts, forks, threads, libraries unloaded), the program keeps its
//! output and exit status, and what was collected is not lost where it can be kept. Each test
//! backs a line of docs/guarantees.md.
//!
//! Every wait is bounded (`util::DEADLINE`): on a pipe's end, a child's exit, a process's end
//! (pidfd) or, where no event exists, a /proc condition polled against a deadline.

mod collector; // the collector killed, not executable, stalled; the exit not held up; memory bounded
mod containers; // PID namespaces: the program as PID 1, under an init, gpushim run inside and outside
mod exits; // exit() from a signal handler, a vfork child's exit, no __libc_start_main, two exits at once
mod frame_classes; // vendor frames, one suspect per cause, threads per site, suppressions
mod hostile_input; // damaged and random wire streams, malformed and extreme report JSON
mod hostile_programs; // fork handlers, pipes, sigwait, coroutines, cleanup frees, local runtimes, blocked frees
mod jobs; // ranks of a launcher, forked workers: identity, file names, the run summary, the job view
mod metrics; // GPUSHIM_METRICS: /metrics while the program runs, ports, the SD files, a real Prometheus
mod output; // an unwritable output directory, a file-size limit, files and symlinks in the report's way
mod processes; // fork/exec, reaping, fork at start, dlclose/reload, odd arguments, cancel, descriptors, quick exits
mod schedulers; // SIGTERM to the collector alone, to the whole job, a graceful shutdown under run
mod threads_and_signals; // 64 threads, SIGUSR1 bursts, SIGINT to the process group
