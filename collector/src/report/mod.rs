//! The report: the JSON the collector writes and `gpushim report`/`diff` read back.
//!
//! The same structs serve both directions, so what is written can always be read. Fields are
//! documented with their units in `docs/report-schema.md`; fields added after the first
//! version carry `#[serde(default)]` so older reports still read.

use std::fs;
use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

mod holders;
pub mod json;
mod kinds;
pub mod output;
mod process;
mod reach;
mod site;
mod totals;
pub mod words;

pub use holders::*;
pub use kinds::*;
pub use process::*;
pub use reach::*;
pub use site::*;
pub use totals::*;

/// The value of [`Report::schema`] this collector writes and reads.
pub const SCHEMA: &str = "gpushim.report.v1";

/// Why a report was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Reason {
    /// The target ran its exit path.
    Exit,
    /// The stream ended without an exit event and the program was gone (killed, crashed, or
    /// the stream broke as it ended).
    Killed,
    /// A stop signal (SIGTERM, SIGHUP, SIGINT: a scheduler's or a terminal's stop) reached the
    /// job's collector before the stream ended; the report's `signal` names it, and its notes
    /// say whether the program still ran its exit path.
    Stopped,
    /// The stream ended without an exit event while the program went on running (it closed the
    /// shim's socket, e.g. with `close_range`): what came after is not recorded.
    Disconnected,
    /// A snapshot was requested (SIGUSR1 or `gpushim snapshot`).
    Snapshot,
    /// An allocation failed with out of memory (the report's `oom` says which).
    Oom,
    /// A rolling report of a long run (`GPUSHIM_REPORT_INTERVAL`; the report's `interval` says
    /// which).
    Interval,
}

impl Reason {
    /// The name used in the JSON and in messages.
    pub fn name(self) -> &'static str {
        match self {
            Reason::Exit => "exit",
            Reason::Killed => "killed",
            Reason::Stopped => "stopped",
            Reason::Disconnected => "disconnected",
            Reason::Snapshot => "snapshot",
            Reason::Oom => "oom",
            Reason::Interval => "interval",
        }
    }
}

/// A whole report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Always [`SCHEMA`].
    pub schema: String,
    /// Process id of the target.
    pub pid: u32,
    /// Parent process id of the target.
    #[serde(default)]
    pub ppid: u32,
    /// The target's command line.
    pub command: Vec<String>,
    /// The target's working directory when tracing started.
    #[serde(default)]
    pub cwd: String,
    /// Why the report was written.
    pub reason: Reason,
    /// For reason `stopped`: the stop signal's name (`SIGTERM`, `SIGHUP`, `SIGINT`); absent
    /// otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<String>,
    /// The snapshot's number (1, 2, …) for snapshots; absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<u32>,
    /// The label of a snapshot asked for through the Python API (`gpushim.snapshot(label)`),
    /// reduced to `[A-Za-z0-9._-]`, at most 64 characters; absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// The interval report's number (1, 2, …) for interval reports; absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<u32>,
    /// The failed allocation an out-of-memory report is about; absent in other reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oom: Option<Oom>,
    /// Wall-clock time tracing started, ns since the Unix epoch.
    #[serde(default)]
    pub start_unix_ns: u64,
    /// Seconds from the first to the last event the report covers.
    pub duration_s: f64,
    /// Version of the shim that wrote the event stream.
    pub shim_version: String,
    /// Version of the collector that wrote the report.
    #[serde(default)]
    pub collector_version: String,
    /// Process-wide counters.
    pub totals: Totals,
    /// Live memory per kind.
    pub kinds: Kinds,
    /// Live device and managed memory per device ordinal, ascending.
    pub devices: Vec<DeviceTotals>,
    /// Use of the driver's virtual memory management API (`cuMemCreate`, `cuMemMap`, …) per
    /// device ordinal, ascending (-1: host memory or an unknown device); absent when the
    /// program made no such call.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub vmm: Vec<VmmTotals>,
    /// Allocation sites, most live bytes first.
    pub sites: Vec<Site>,
    /// Leak suspects, those with definitely lost allocations first, then most live bytes first.
    pub suspects: Vec<Suspect>,
    /// Suspects a suppression hid; absent when none was.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub suppressed: Vec<Suppressed>,
    /// When there is no suspect: the largest growth that rose and then held still; absent
    /// otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_growth: Option<HeldGrowth>,
    /// Failed allocations, in order.
    pub failures: Vec<FailureRecord>,
    /// Device memory as the driver last reported it (sent by the shim with out-of-memory
    /// failures), one entry per device.
    #[serde(default)]
    pub mem_info: Vec<MemInfoRecord>,
    /// Live bytes per kind and per device over time.
    #[serde(default)]
    pub timeline: Timeline,
    /// Contexts torn down, in order, with the live memory they freed; absent when none was.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub context_teardowns: Vec<TeardownRecord>,
    /// Allocations live when a CPython program's exit heap walk started that only the
    /// interpreter's teardown freed afterwards (`__del__` of objects in globals); they are
    /// counted as live in this report. Absent when there were none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interpreter_teardown: Option<InterpreterTeardown>,
    /// Where the GPU memory is, per device ordinal (ascending): live bytes per owner, and the
    /// driver's view of the process's device memory with the untraced remainder.
    #[serde(default)]
    pub gpu_memory: Vec<GpuMemory>,
    /// Device memory by kind (parameters, gradients, optimizer state, ..., untraced), per
    /// device, from the heap walk of the report's moment; absent without one (written in the
    /// final report; a snapshot's is made from its holders file when it is read).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub memory_kinds: Vec<DeviceKinds>,
    /// Observations that are not leak suspects (untraced device memory that grew), in words.
    #[serde(default)]
    pub findings: Vec<String>,
    /// The machine's GPU behind each device ordinal the process used, as its driver said;
    /// absent when the shim sent none (older shims, no device memory).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub physical_devices: Vec<PhysicalDevice>,
    /// Who the process is in a multi-process job (rank, launcher, visible GPUs); absent when
    /// no launcher variable was set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<Identity>,
    /// Messages from the shim and the collector about the report's completeness.
    pub notes: Vec<String>,
    /// The live pointer allocations at the end of the report, one each (at most
    /// [`MAX_ALLOCATIONS`], the largest), by address; absent in older files. Exports that need
    /// addresses (`--format torch-snapshot`) read it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allocations: Vec<LiveAllocation>,
    /// The reachability scan of the program's memory (final report of a normal exit; absent
    /// when there was none, e.g. `GPUSHIM_REACHABILITY=0` or a killed program).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reachability: Option<Reachability>,
    /// Who holds the memory (CPython targets): the heap walk's companion file, merged in when
    /// the report is read or rendered; never written into the report itself.
    #[serde(skip)]
    pub holders: Option<Holders>,
}

/// Whether a count is 0: counts that are 0 are left out of the JSON.
#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
pub(crate) fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Report {
    /// Reads and checks a report file.
    ///
    /// # Errors
    /// If the file cannot be read, is not JSON of this shape, or has another schema; the
    /// message says which, without the path (the caller adds it).
    pub fn read(path: &Path) -> Result<Report> {
        let text = fs::read(path)?;
        Report::from_slice(&text)
    }

    /// Parses and checks a report.
    ///
    /// # Errors
    /// If `bytes` is not JSON of this shape or has another schema.
    pub fn from_slice(bytes: &[u8]) -> Result<Report> {
        let value: serde_json::Value = serde_json::from_slice(bytes).context("not valid JSON")?;
        match value.get("schema").map(|s| s.as_str()) {
            Some(Some(SCHEMA)) => {}
            Some(Some(holders::HOLDERS_SCHEMA)) => bail!(
                "a gpushim holders file (who holds each site's memory), not a report: give the report beside it \
                 (the same name without .holders), which shows its holders"
            ),
            Some(Some(other)) => bail!("schema is {other:?}, this gpushim reads {SCHEMA:?}"),
            _ if value.get("reachability").is_some() && value.get("sites").is_some() => bail!(
                "a gpushim reachability file (a snapshot's scan), not a report: give the snapshot's report \
                 beside it (the same name without .reach), which shows its scan"
            ),
            _ => bail!("not a gpushim report (no \"schema\" string)"),
        }
        serde_json::from_value(value).context("malformed gpushim report")
    }

    /// The site with id `id`, if the report lists it.
    /// The reason in words for a summary: its name, and for `stopped` the signal
    /// (`stopped by SIGTERM`).
    pub fn reason_words(&self) -> String {
        match (&self.reason, &self.signal) {
            (Reason::Stopped, Some(sig)) => format!("stopped by {sig}"),
            (r, _) => r.name().to_string(),
        }
    }

    pub fn site(&self, id: u32) -> Option<&Site> {
        self.sites.iter().find(|s| s.id == id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn minimal() -> Report {
        Report {
            schema: SCHEMA.into(),
            pid: 1,
            ppid: 0,
            command: vec!["a".into()],
            cwd: "/".into(),
            reason: Reason::Snapshot,
            signal: None,
            snapshot: Some(2),
            label: None,
            interval: None,
            start_unix_ns: 5,
            duration_s: 0.5,
            shim_version: "0.1.0".into(),
            collector_version: "0.1.0".into(),
            totals: Totals::default(),
            kinds: Kinds::default(),
            devices: vec![DeviceTotals { ordinal: 0, live_bytes: 1, live_count: 1, peak_live_bytes: 1 }],
            vmm: vec![],
            sites: vec![Site { id: 3, frames: vec![Frame::default()], series: vec![(0.25, 7)], ..Site::default() }],
            suspects: vec![],
            suppressed: vec![],
            held_growth: None,
            failures: vec![],
            mem_info: vec![],
            timeline: Timeline {
                devices: vec![0],
                points: vec![TimelinePoint { t_s: 0.5, kinds: [1, 0, 0], devices: vec![1] }],
            },
            interpreter_teardown: None,
            context_teardowns: vec![TeardownRecord {
                api: "cudaDeviceReset".into(),
                device: 0,
                created: false,
                count: 2,
                bytes: 3,
            }],
            gpu_memory: vec![],
            memory_kinds: vec![],
            findings: vec![],
            notes: vec!["n".into()],
            allocations: vec![],
            physical_devices: Vec::new(),
            identity: None,
            holders: None,
            reachability: None,
            oom: None,
        }
    }

    #[test]
    fn round_trips() {
        let r = minimal();
        let text = serde_json::to_vec(&r).unwrap();
        assert_eq!(Report::from_slice(&text).unwrap(), r);
        let v: serde_json::Value = serde_json::from_slice(&text).unwrap();
        assert_eq!(v["reason"], "snapshot");
        assert_eq!(v["sites"][0]["frames"][0]["file"], serde_json::Value::Null);
        let mut exit = r.clone();
        exit.snapshot = None;
        let v = serde_json::to_value(&exit).unwrap();
        assert!(v.get("snapshot").is_none(), "no snapshot field outside snapshots");
    }

    #[test]
    fn malformed_reports_are_errors() {
        let cases: &[(&[u8], &str)] = &[
            (b"", "not valid JSON"),
            (b"{\"schema\": ", "not valid JSON"),
            (b"[1, 2]", "not a gpushim report"),
            (br#"{"schema": "gpushim.holders.v1", "sites": {}}"#, "a gpushim holders file"),
            (br#"{"reachability": {}, "sites": {}}"#, "a gpushim reachability file"),
            (b"{}", "not a gpushim report"),
            (b"{\"schema\": \"other.v9\"}", "schema is \"other.v9\""),
            (b"{\"schema\": \"gpushim.report.v1\", \"pid\": -1}", "malformed gpushim report"),
            (b"{\"schema\": \"gpushim.report.v1\"}", "malformed gpushim report: missing field"),
        ];
        for (input, want) in cases {
            let e = Report::from_slice(input).unwrap_err();
            assert!(format!("{e:#}").starts_with(want), "{:?}: {e:#}", String::from_utf8_lossy(input));
        }
        let e = Report::read(Path::new("/nonexistent/gpushim-1.json")).unwrap_err();
        assert!(format!("{e:#}").contains("No such file"), "{e:#}");
    }
}
