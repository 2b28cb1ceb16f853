//! The gpushim collector as a library: everything the `gpushim` binary does. The shim
//! (`libgpushim.so`) in a traced program streams the program's CUDA allocation events to
//! `gpushim collect`; this crate decodes that stream, keeps the live set, symbolizes stacks,
//! ranks leak suspects and writes reports, then reads reports back to render them
//! (`gpushim report`) and to compare two (`gpushim diff`). The binary only parses the command
//! line and calls the subcommands re-exported here.
//!
//! The modules are layers, each a folder, and a module uses only its own layer and those below it
//! (the order is written once, in docs/ARCHITECTURE.md, "Layers", and checked by
//! tests/layers.rs). What each holds:
//! - `account`: the live set and its counts, in sequence order;
//! - `cmd`: one module per subcommand;
//! - `collect`: the collection of one stream: decoding and ordering, the driving loop, and the
//!   writer of every kind of report;
//! - `compare`: reports read back and compared (`diff`, the job view);
//! - `control`: the control endpoint `gpushim top` reads a running collector's live view from;
//! - `error`: exit codes;
//! - `explain`: the live set made into a report (symbols, frame classes, owners, suspects'
//!   causes, the driver's view, who holds the memory, reachability, a process's identity);
//! - `metrics`: the Prometheus endpoint, a copy of the live set's numbers;
//! - `render`: one file per output format;
//! - `report`: the report's types, its wording and how it is written as JSON and to files;
//! - `settings`: every environment variable the collector reads, read once.
//!
//! Invariants:
//! - Events are applied in sequence-number order, whatever order they arrive in: a snapshot
//!   holds exactly the events numbered below its boundary, an out-of-memory report exactly those
//!   up to and including its failure.
//! - Memory stays bounded however long the stream: series are thinned, the reorder buffer gives
//!   a missing number up as lost past a bound, failures and listed sites are capped.
//! - The accounting (`account`) is pure: no I/O, no clocks.
//! - A stream that breaks after its Hello event still gets a report of everything valid received
//!   before the break. Report files never replace a file and never follow a symlink, and what is
//!   written (the report's types) can always be read back.
//! - Exit codes are those of the `error` module: 0 success, 1 a broken event stream (or a demo
//!   that did not find its leak), 2 usage
//!   or input errors, 3 `run --fail-on-leak` found a leak; `run` passes the program's own on.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

mod account;
mod cmd;
mod collect;
mod compare;
mod control;
mod error;
mod explain;
mod metrics;
mod render;
mod report;
mod settings;

pub use cmd::collect::run as collect;
pub use cmd::demo::{run as demo, Options as DemoOptions};
pub use cmd::diff::run as diff;
pub use cmd::kernel::{install as install_kernel, Options as KernelOptions, Place as KernelPlace};
pub use cmd::preload::run as preload_path;
pub use cmd::report::run as report;
pub use cmd::run::{parse_bytes, run, Options as RunOptions};
pub use cmd::snapshot::{run as snapshot, Signal};
pub use cmd::top::{run as top, Options as TopOptions};
pub use compare::diff::DiffFormat;
pub use error::{coded, exit_code, is_broken_pipe, USAGE};
pub use render::format::Format;
pub use render::TextOptions;
