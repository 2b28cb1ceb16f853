//! What the stream said besides the allocations (stacks, modules, thread names, notes, the
//! driver's view, heap walks, reachability scans, the process's identity), and the reports made
//! part-way: a snapshot at its boundary, an out-of-memory report at its failure, an interval
//! report, and the files of a heap walk or a scan beside their snapshot.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use gpushim_wire::{Failed, HeapWalk, Hello, MemInfo, Reach, WalkReason};

use super::write::{Kind, Writer};
use crate::account::live::State;
use crate::account::reorder::{Observer, SnapshotPoint};
use crate::explain::assemble::{self, Context};
use crate::explain::holders::{self, Holders};
use crate::explain::oom::{self, MemInfoLog, MAX_OOM_REPORTS};
use crate::explain::symbolize::Symbolizer;
use crate::explain::{identity, nvml, reach};
use crate::report::output::in_a_line;
use crate::report::words::fmt_bytes;
use crate::report::{Identity, PhysicalDevice, Reason, Report};

/// Everything besides the live set that reports need, and where they go.
pub(super) struct Sink<'a> {
    pub(super) hello: Hello,
    pub(super) sym: Symbolizer,
    pub(super) stacks: HashMap<u32, Vec<u64>>,
    /// Each thread's name from its first event, by kernel thread id.
    pub(super) thread_names: HashMap<u32, String>,
    /// The program's activity over time (wire's `Activity`): `(ts_ns, calls so far)`, thinned,
    /// and the latest, which the verdict needs exactly.
    pub(super) activity: crate::account::series::Series<u64, 4096>,
    pub(super) activity_last: Option<(u64, u64)>,
    pub(super) notes: Vec<String>,
    pub(super) mem_info: BTreeMap<i32, MemInfo>,
    /// Recent MemInfo events, to find the one sent with an out-of-memory failure.
    pub(super) mem_log: MemInfoLog,
    /// Out-of-memory failures applied so far.
    pub(super) oom_count: u32,
    /// Sequence numbers given up as lost so far (as of the latest event pushed).
    pub(super) lost: u64,
    /// The heap walk of the final report, attributed when it arrived (before `Exit`).
    pub(super) exit_holders: Option<Holders>,
    /// Heap walks received.
    pub(super) walks: u32,
    /// Labels of snapshots asked for through the API, by snapshot number.
    pub(super) labels: HashMap<u32, String>,
    /// The directory asked for by API snapshots that named one, by snapshot number: their
    /// report, holders and reachability files go there rather than into the output directory.
    pub(super) dirs: HashMap<u32, PathBuf>,
    /// The number each snapshot is written under, by the stream's snapshot number: snapshots
    /// are numbered 1, 2, … within each directory they go to, so that the per-cell snapshots a
    /// notebook writes into a directory of their own leave no gaps in the numbers of those in
    /// the output directory.
    numbers: HashMap<u32, u32>,
    /// The last number given in each directory.
    numbered: HashMap<PathBuf, u32>,
    /// NVML sampling of the target, when asked for.
    pub(super) sampler: Option<nvml::Sampler>,
    /// The driver's view as of the latest report.
    pub(super) driver: Option<nvml::DriverView>,
    /// When the program's own work ended (monotonic ns): the start of the exit heap walk, or
    /// of an earlier pause of the tool's own (a snapshot's heap walk or reachability scan) after
    /// which the program allocated and freed nothing more. The growth tests end there: seconds
    /// spent walking or scanning a large heap must not read as a leak that stopped.
    pub(super) work_end: Option<u64>,
    /// The start of the first such pause since the program's last allocation or free.
    pub(super) pause_start: Option<u64>,
    /// The process's place in its job (the stream's `Identity` event), if any.
    pub(super) identity: Option<Identity>,
    /// The machine's GPU behind each device ordinal (`DeviceInfo` events), by ordinal.
    pub(super) physical: BTreeMap<i32, PhysicalDevice>,
    /// Interval reports written so far.
    pub(super) intervals: u32,
    /// Snapshots written for `gpushim top` so far.
    pub(super) top_snapshots: u32,
    /// The reachability scan of the final report (it arrives before `Exit`), classified with
    /// the final report once the stream is read.
    pub(super) exit_reach: Option<Reach>,
    /// Where the reports go.
    pub(super) out: Writer<'a>,
}

impl Observer for Sink<'_> {
    fn snapshot(&mut self, point: &SnapshotPoint, state: &State) {
        Sink::snapshot(self, point, state);
    }

    fn out_of_memory(&mut self, failed: &Failed, state: &State) {
        self.oom(failed, state);
    }
}

/// What differs between the reports of one stream: why, up to when, and what it knows of
/// them; the rest of a report's [`Context`] is the sink's.
pub(super) struct Ending {
    pub(super) reason: Reason,
    pub(super) snapshot: Option<u32>,
    pub(super) end_ts_ns: u64,
    pub(super) lost_events: u64,
    pub(super) notes: Vec<String>,
    pub(super) work_end_ns: Option<u64>,
}

impl Ending {
    /// A report that is not a snapshot and does not know when the program's work ended.
    pub(super) fn now(reason: Reason, end_ts_ns: u64, lost_events: u64, notes: Vec<String>) -> Ending {
        Ending { reason, snapshot: None, end_ts_ns, lost_events, notes, work_end_ns: None }
    }
}

impl<'a> Sink<'a> {
    /// A sink for the stream that `hello` opened, writing through `out`.
    pub(super) fn new(hello: Hello, out: Writer<'a>) -> Sink<'a> {
        let mut sym = Symbolizer::new();
        sym.python_mut().set_cwd(&hello.cwd);
        Sink {
            hello,
            sym,
            stacks: HashMap::new(),
            thread_names: HashMap::new(),
            activity: Default::default(),
            activity_last: None,
            notes: Vec::new(),
            mem_info: BTreeMap::new(),
            mem_log: MemInfoLog::default(),
            oom_count: 0,
            lost: 0,
            exit_holders: None,
            exit_reach: None,
            walks: 0,
            labels: HashMap::new(),
            dirs: HashMap::new(),
            numbers: HashMap::new(),
            numbered: HashMap::new(),
            sampler: None,
            driver: None,
            work_end: None,
            pause_start: None,
            identity: None,
            physical: BTreeMap::new(),
            intervals: 0,
            top_snapshots: 0,
            out,
        }
    }

    /// The program's activity so far: the thinned series and its latest point.
    fn activity_points(&self) -> Vec<(u64, u64)> {
        let mut v = self.activity.points().to_vec();
        if let Some(last) = self.activity_last.filter(|l| v.last() != Some(l)) {
            v.push((last.0.max(v.last().map_or(0, |p| p.0)), last.1));
        }
        v
    }

    /// The program's activity reached `count` at `ts_ns` (wire's `Activity`).
    pub(super) fn activity(&mut self, ts_ns: u64, count: u64) {
        self.activity.record(ts_ns, count);
        self.activity_last = Some((ts_ns, count));
    }

    /// The report of `state` that `e` describes, with the stream's identity and GPUs: what the
    /// snapshot, out-of-memory, interval and final reports share.
    pub(super) fn build_report(&mut self, state: &State, e: Ending) -> Report {
        let ctx = Context {
            hello: &self.hello,
            reason: e.reason,
            snapshot: e.snapshot,
            end_ts_ns: e.end_ts_ns,
            lost_events: e.lost_events,
            notes: e.notes,
            mem_info: &self.mem_info,
            stacks: &self.stacks,
            driver: self.driver.as_ref(),
            work_end_ns: e.work_end_ns,
            thread_names: &self.thread_names,
            holders: self.exit_holders.as_ref(),
            activity: &self.activity_points(),
        };
        let mut report = assemble::build(state, ctx, &mut self.sym);
        report.identity = self.identity.clone();
        report.physical_devices = self.physical.values().cloned().collect();
        report
    }

    /// The stem of this process's report files (`gpushim-<pid>`, or with its rank).
    pub(super) fn stem(&self) -> String {
        identity::stem(self.hello.pid, self.identity.as_ref())
    }

    /// Gives snapshot `n` of the stream (asked for now, its label and directory known) the
    /// next number of the directory it goes to.
    pub(super) fn number_snapshot(&mut self, n: u32) {
        let dir = self.dirs.get(&n).cloned().unwrap_or_else(|| self.out.dir.clone());
        let last = self.numbered.entry(dir).or_insert(0);
        *last += 1;
        self.numbers.insert(n, *last);
    }

    /// The number snapshot `n` of the stream is written under (see [`Sink::number_snapshot`]).
    fn public_number(&self, n: u32) -> u32 {
        self.numbers.get(&n).copied().unwrap_or(n)
    }

    /// The file name (without `.json`) of snapshot `n` of the stream:
    /// `gpushim-[rankR-]PID-snapshot-N`, and `-LABEL` after it for a labelled API snapshot.
    fn snapshot_stem(&self, n: u32) -> String {
        let shown = self.public_number(n);
        match self.labels.get(&n).filter(|l| !l.is_empty()) {
            Some(l) => format!("{}-snapshot-{shown}-{l}", self.stem()),
            None => format!("{}-snapshot-{shown}", self.stem()),
        }
    }

    /// A heap walk's result: attributed to the live set as it is now (the walk saw the objects
    /// then); written beside its snapshot or out-of-memory report at once (and returned, for
    /// `gpushim top`), kept for the end for the final report.
    pub(super) fn heap_walk(&mut self, h: &HeapWalk, state: &State) -> Option<holders::Holders> {
        self.walks += 1;
        if h.reason != WalkReason::Exit {
            self.pause_start.get_or_insert(h.ts_ns);
        }
        let mut holders = holders::attribute(h, state, self.hello.pid, self.sym.python());
        if h.reason == WalkReason::Snapshot {
            holders.number = Some(self.public_number(h.number));
        }
        let stem = match h.reason {
            WalkReason::Exit => {
                self.work_end = Some(self.pause_start.map_or(h.ts_ns, |p| p.min(h.ts_ns)));
                self.exit_holders = Some(holders);
                return None;
            }
            WalkReason::Snapshot => format!("{}.holders", self.snapshot_stem(h.number)),
            WalkReason::Oom => format!("{}-oom-{}.holders", self.stem(), h.number),
        };
        let dir = (h.reason == WalkReason::Snapshot).then(|| self.dirs.get(&h.number).cloned()).flatten();
        match self.out.in_dir(dir.as_deref(), |w| w.json(&holders, &stem)) {
            Ok(path) => {
                // Said for snapshots by signal; an API snapshot's caller finds it beside its file.
                if h.reason != WalkReason::Snapshot || !self.labels.contains_key(&h.number) {
                    let _ = writeln!(
                        self.out.err,
                        "gpushim: {}; holders written to {}",
                        holders.walk.message,
                        in_a_line(&path)
                    );
                    // The walk's kinds (no workspaces or untraced bytes: the report has those).
                    for l in crate::render::text::kinds_lines(&holders.kinds) {
                        let _ = writeln!(self.out.err, "gpushim: {l}");
                    }
                }
            }
            Err(e) => {
                let _ = writeln!(self.out.err, "gpushim: cannot write {stem}.json: {e:#}");
            }
        }
        Some(holders)
    }

    /// A reachability scan: classified against the live set as it is now (the scan saw memory
    /// then); written beside its snapshot or out-of-memory report at once
    /// (`…-snapshot-N.reach.json`), kept for the end for the final report.
    pub(super) fn reach(&mut self, r: &Reach, state: &State) {
        self.pause_start.get_or_insert(r.ts_ns);
        if r.reason == WalkReason::Exit {
            // Classified with the final report, once the stream is read: classifying names
            // frames, which reads the program's files, and the program's exit must not wait
            // for that.
            self.exit_reach = Some(r.clone());
            return;
        }
        let stem = if r.reason == WalkReason::Oom {
            format!("{}-oom-{}.reach", self.stem(), r.number)
        } else {
            format!("{}.reach", self.snapshot_stem(r.number))
        };
        let file = reach::classify(r, state, &self.stacks, &mut self.sym);
        let dir = (r.reason != WalkReason::Oom).then(|| self.dirs.get(&r.number).cloned()).flatten();
        match self.out.in_dir(dir.as_deref(), |w| w.json(&file, &stem)) {
            // Said for snapshots by signal and out-of-memory reports; an API snapshot's caller
            // finds it beside its file.
            Ok(path)
                if reach::worth_a_line(&file.reachability)
                    && (r.reason == WalkReason::Oom || !self.labels.contains_key(&r.number)) =>
            {
                let lead = reach::lead_line(&file.reachability).map(|l| format!("{l}; ")).unwrap_or_default();
                let _ = writeln!(
                    self.out.err,
                    "gpushim: {lead}{}; written to {}",
                    reach::scan_line(&file.reachability),
                    in_a_line(&path)
                );
            }
            Ok(_) => {}
            Err(e) => {
                let _ = writeln!(self.out.err, "gpushim: cannot write {stem}.json: {e:#}");
            }
        }
    }

    /// Writes the out-of-memory report for `f`, which `state` has just applied (up to
    /// [`MAX_OOM_REPORTS`]), and says where on stderr.
    fn oom(&mut self, f: &Failed, state: &State) {
        self.oom_count += 1;
        let n = self.oom_count;
        let what = format!(
            "{} of {}{}",
            f.api.name(),
            fmt_bytes(f.size),
            if f.device >= 0 { format!(" on GPU {}", f.device) } else { String::new() }
        );
        if n > MAX_OOM_REPORTS {
            if n == MAX_OOM_REPORTS + 1 {
                let _ = writeln!(
                    self.out.err,
                    "gpushim: out of memory again ({what}); no more out-of-memory reports are \
                     written (at most {MAX_OOM_REPORTS}), the final report counts them"
                );
            }
            return;
        }
        self.driver = self.sampler.as_ref().map(nvml::Sampler::view_now);
        let ending = Ending::now(Reason::Oom, f.ts_ns, self.lost, self.notes.clone());
        let mut report = self.build_report(state, ending);
        let frames = match self.stacks.get(&f.stack) {
            Some(addrs) => self.sym.stack_of(f.stack, addrs),
            None => Vec::new(),
        };
        let start = state.first_ts_ns.unwrap_or(f.ts_ns).min(f.ts_ns);
        report.oom = Some(oom::record(f, self.mem_log.for_failure(f), start, frames));
        let stem = format!("{}-oom-{n}", self.stem());
        let _ = self.out.report(&stem, Kind::Oom { what: &what }, &mut report);
    }

    /// Writes interval report number `intervals + 1` of `state` (its latest event at `ts_ns`),
    /// then removes the oldest kept one beyond `keep`. Failures are said on stderr once each and
    /// collection goes on.
    pub(super) fn interval(&mut self, state: &State, ts_ns: u64, keep: usize) {
        self.intervals += 1;
        let n = self.intervals;
        self.driver = self.sampler.as_ref().map(nvml::Sampler::view_now);
        let ending = Ending::now(Reason::Interval, ts_ns, self.lost, self.notes.clone());
        let mut report = self.build_report(state, ending);
        report.interval = Some(n);
        let stem = format!("{}-interval-{n}", self.stem());
        let _ = self.out.report(&stem, Kind::Interval { n, keep }, &mut report);
    }

    /// Writes a snapshot report of the live set as applied so far, asked for by `gpushim top`
    /// (through the control endpoint, not the program): `gpushim-[rankR-]PID-snapshot-top-N.json`,
    /// labelled `top`, numbered on its own (the program's snapshots keep their numbers), with no
    /// heap walk or reachability scan (those run in the program). Nothing is said on stderr:
    /// the client gets the path.
    pub(super) fn top_snapshot(&mut self, state: &State) -> anyhow::Result<PathBuf> {
        self.top_snapshots += 1;
        let n = self.top_snapshots;
        self.driver = self.sampler.as_ref().map(nvml::Sampler::view_now);
        let end = state.last_ts_ns;
        let ending = Ending { snapshot: Some(n), ..Ending::now(Reason::Snapshot, end, self.lost, self.notes.clone()) };
        let mut report = self.build_report(state, ending);
        report.label = Some("top".to_string());
        let stem = format!("{}-snapshot-top-{n}", self.stem());
        self.out.report(&stem, Kind::TopSnapshot, &mut report)
    }

    /// Writes one snapshot report and says where on stderr (or answers the API's caller); a
    /// failure to write is reported and collection goes on.
    fn snapshot(&mut self, p: &SnapshotPoint, state: &State) {
        let mut notes = self.notes.clone();
        if p.late_by > 0 {
            notes.push(format!(
                "the snapshot request for sequence number {} arrived after {} later events had \
                 been applied; the snapshot includes them",
                p.boundary, p.late_by
            ));
        }
        if p.missing > 0 {
            notes.push(format!(
                "{} before this snapshot's boundary never arrived",
                crate::report::words::count(p.missing, "event")
            ));
        }
        self.driver = self.sampler.as_ref().map(nvml::Sampler::view_now);
        let n = self.public_number(p.number);
        let ending = Ending { snapshot: Some(n), ..Ending::now(Reason::Snapshot, p.ts_ns, p.missing, notes) };
        let mut report = self.build_report(state, ending);
        let label = self.labels.get(&p.number).cloned();
        let api = label.is_some();
        report.label = label.filter(|l| !l.is_empty());
        let stem = self.snapshot_stem(p.number);
        let dir = self.dirs.get(&p.number).cloned();
        let _ = self
            .out
            .in_dir(dir.as_deref(), |w| w.report(&stem, Kind::Snapshot { n, asked: p.number, api }, &mut report));
    }
}
