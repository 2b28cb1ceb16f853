//! Helpers shared by the tests: where the built artifacts are, a unique directory per test,
//! running a target under the shim (to completion, or live with every wait bounded), other
//! processes seen through /proc, and reading reports. On failure, assertions print the whole run
//! (command, environment, status, stdout, stderr) through the Display of `Outcome` or `Done`.

mod files; // built artifacts, scratch directories, scripts, directory listings
mod live; // a target acted on while it runs (Live → Done), every wait bounded
mod procs; // processes that are not our child: the collector, signals, /proc
mod reports; // reading reports: JSON files, totals, kinds, sites
mod target; // a target run to completion (Target → Outcome), the gpushim command line

pub use files::*;
pub use gpushim_testkit::MIB;
pub use live::*;
pub use procs::*;
pub use reports::*;
pub use target::*;
