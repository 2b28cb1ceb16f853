//! Integration tests: real processes run under `LD_PRELOAD=libgpushim.so` against the CUDA
//! stand-ins that build.rs compiles, with exact numbers asserted from the JSON reports.
//! Build the workspace first (`cargo build --workspace`): the tests run `libgpushim.so` and
//! `gpushim` from the same target directory as this test binary.

mod util;

mod cli; // gpushim run / report / diff / snapshot from outside
mod concurrency; // many threads, exact totals
mod consistency; // the first screen: stderr, text, HTML and JSON of one run agree
mod corpus; // the labelled leak corpus's stand-in programs, run and scored end to end
mod demo; // gpushim demo: the bundled examples with the stand-ins of the build or of a wheel
mod examples; // the bundled C and Rust examples
mod faults; // whatever fails on our side, the program is unharmed (docs/guarantees.md)
mod holders; // who holds the memory: the heap walk in CPython programs
mod interception; // every allocation path: symbol, static runtime, dlsym, RTLD_NEXT neighbours
mod layers; // the shim, collector and wire modules use none above their layer, and no circle
mod lifecycle; // fork, SIGKILL, exit, non-CUDA processes, missing collector
mod pyapi; // the Python API, the pytest plugin and the Jupyter magic (python/gpushim)
mod python; // Python frames (file, function, line) in CPython programs, 3.10 to 3.13
mod reach; // definitely lost: the reachability scan of the program's memory
mod rings; // per-thread rings: many threads, threads that end, snapshots and forks while threads allocate
mod snapshots; // SIGUSR1 snapshots hold exactly the allocations made before the signal
#[path = "../standins/circles.rs"]
mod standin_circles; // the C stand-ins: no two files use each other (nm)
mod top; // gpushim top: the live view from the collector's control endpoint, --once, --json, tmux
mod unwinding; // the cached unwinder agrees with libgcc's
