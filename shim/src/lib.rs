//! `libgpushim.so`: loaded with `LD_PRELOAD` into any CUDA program, it records every allocation
//! and free of device, managed and pinned host memory, with the native backtrace of the caller,
//! and streams the events to the `gpushim` collector.
//!
//! How an allocation reaches us (docs/gpu-matrix.md has what the frameworks use):
//! - by symbol: the runtime and driver entry points are exported from this library, so a
//!   program that links `libcudart.so`/`libcuda.so` dynamically binds to them first;
//! - by `dlsym(handle, name)`: our `dlsym` hands out our wrapper for the exact names we wrap
//!   and remembers the real function it found behind that handle (for a runtime function, a
//!   copy of the wrapper bound to it for good: several runtimes may be loaded, `route`);
//! - by `cuGetProcAddress`: our wrapper of it swaps each returned pointer that is one of the
//!   functions we wrap (matched by address, so the ABI variant the caller asked for is kept),
//!   including `cuGetProcAddress` itself, which the CUDA runtime asks for first.
//!
//! Invariants:
//! - Every argument and every result passes through unchanged; a hook never panics across the
//!   FFI boundary (recording runs under `catch_unwind`) and never blocks on the collector
//!   except through the bounded channel's backpressure.
//! - Only the outermost intercepted call records: a `cudaMalloc` that calls `cuMemAlloc_v2`
//!   inside is one allocation (a per-thread depth counter).
//! - A process that never allocates CUDA memory is untouched: the constructor only installs the
//!   snapshot signal handler, the fork handlers and an `at_quick_exit` handler; the writer
//!   thread and the collector start at the first event. Without a CUDA library, a `dlsym` of an
//!   intercepted name finds nothing, as without the shim.
//! - The signal handler touches atomics only.
//!
//! Its modules are layers whose order is written once, in docs/ARCHITECTURE.md ("Layers"), and
//! checked by tests/layers.rs: `exports` holds every exported symbol (the CUDA ones generated from
//! the list in `hook`), `record` the hot path, `writer` the writer thread, `config` the settings,
//! read once.
#![allow(clippy::missing_safety_doc)] // each export has its `# Safety` section in exports/

mod alloc_watch;
mod capture;
mod clock;
mod config;
mod event;
mod exit;
mod exit_scan;
mod exports;
mod hash;
mod hook;
mod inflight;
mod init;
mod last_stack;
mod launch;
mod loader;
mod own_tls;
mod per_thread;
mod probe;
mod python;
mod race_once;
mod reach;
mod real;
mod record;
mod ring;
mod route;
mod slow_exit;
mod socket;
mod state;
mod sys;
mod unwind;
mod writer;

/// The system allocator, watched once (`alloc_watch`): where the event channel's buffer lies.
#[global_allocator]
static ALLOCATOR: alloc_watch::Watching = alloc_watch::Watching;
