//! The gpushim collector as a library: everything the `gpushim` binary does. The shim
//! (`libgpushim.so`) in a traced program streams the program's CUDA allocation events to
//! `gpushim collect`; this crate decodes that stream, keeps the live set, symbolizes stacks,
//! ranks leak suspects and writes reports, then reads reports back to render them
//! (`gpushim report`) and to compare two (`gpushim diff`). The binary only parses the command
//! line and calls [`cmd`].
//!
//! The way through: [`collect`] decodes the stream (its format is the `gpushim-wire` crate) and
//! hands the allocation events to the [`reorder`] buffer, which applies them to the [`live`]
//! set; the live set keeps its [`gauge`]s and the [`vmm`] handles and mappings, their live bytes over time in thinned [`series`],
//! and the [`timeline`]. At a snapshot boundary, at an out-of-memory failure and at the end of
//! the stream, the state becomes a [`report`]: [`symbolize`] turns stacks into frames (Python
//! frames from [`pyframes`]), [`frames`] classes each frame and names each site, [`owners`]
//! names who made each live allocation, [`rank`] picks the leak suspects and groups them by
//! cause, less those [`suppress`] hides, and [`gpumem`] says where the GPU memory is, with the
//! driver's view that [`nvml`] samples while the stream is read. [`render`] writes a report in
//! each output format and [`diff`] compares two, both in the wording of [`words`].
//!
//! Invariants:
//! - Events are applied in sequence-number order, whatever order they arrive in: a snapshot
//!   holds exactly the events numbered below its boundary, an out-of-memory report exactly those
//!   up to and including its failure.
//! - Memory stays bounded however long the stream: series are thinned, the reorder buffer gives
//!   a missing number up as lost past a bound, failures and listed sites are capped.
//! - The accounting ([`live`], [`vmm`], [`reorder`], [`gauge`], [`series`], [`timeline`], [`rank`]) is
//!   pure: no I/O, no clocks.
//! - A stream that breaks after its Hello event still gets a report of everything valid received
//!   before the break. Report files never replace a file and never follow a symlink, and what is
//!   written ([`report::Report`]) can always be read back.
//! - Exit codes are those of [`error`].
//! - No module imports one that imports it back. [`series`], [`report`], [`words`] and
//!   [`error`] import no other module of the crate but `report`; the accounting imports only
//!   those and itself, in the order series, gauge, timeline, vmm, live, reorder, rank; [`holders`]
//!   (who holds the memory: a heap walk attributed to the live set) builds on `live`, `report`
//!   and `words`; [`owners`] imports only `report`, [`nvml`] nothing of the crate, and
//!   [`gpumem`] builds on `nvml`, `report` and `words`; [`identity`] (rank, job id, file names,
//!   a rank's own GPU) builds on `report`; [`symbolize`] builds on those; [`reach`] (definitely
//!   lost: the shim's reachability scan matched with the live set) builds on `live`, `report`,
//!   `words` and `symbolize`; [`metrics`] (Prometheus: a copy of the live set's numbers served on a
//!   thread of its own) builds on `live`, `rank`, `frames`, `symbolize`, `identity` and `words`;
//!   [`render`], [`diff`] and [`collect`] build on those; [`job`] (the
//!   job view of several processes' reports) on `diff`, `identity` and `words`; [`cmd`] builds
//!   on everything, and nothing imports it.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

mod assemble;
pub mod cmd;
pub mod collect;
pub mod diff;
pub mod error;
pub mod frames;
pub mod gauge;
pub mod gpumem;
pub mod holders;
pub mod identity;
pub mod job;
mod json;
pub mod live;
pub mod metrics;
pub mod nvml;
mod oom;
mod output;
pub mod owners;
#[cfg(test)]
mod perf_tests;
pub mod pyframes;
pub mod rank;
pub mod reach;
pub mod render;
pub mod reorder;
pub mod report;
pub mod series;
pub mod suppress;
pub mod symbolize;
pub mod timeline;
pub mod vmm;
pub mod words;
