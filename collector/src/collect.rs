//! The collector's driver: reads the event stream to its end, keeps the live set, writes
//! snapshots when their boundary is reached, an out-of-memory report when an allocation fails
//! with out of memory, and the final report at the end.
//!
//! A stream that breaks part-way (truncated, garbage) still gets a report of everything valid
//! received before the break; the caller exits 1 then.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use gpushim_wire::{Decoder, Event, Failed, HeapWalk, Hello, MemInfo, Reach, WalkReason};

use crate::assemble::{self, Context};
use crate::error::{coded, BROKEN_STREAM};
use crate::holders::{self, Holders};
use crate::identity;
use crate::live::{Op, State};
use crate::oom::{self, MemInfoLog, MAX_OOM_REPORTS};
use crate::output;
use crate::reach;
use crate::render::text;
use crate::reorder::{Observer, SnapshotPoint, Tracker};
use crate::report::{Identity, PhysicalDevice, Reason, Report};
use crate::symbolize::Symbolizer;
use crate::words::fmt_bytes;

/// Options of `gpushim collect`.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Write reports here instead of the directory the stream's Hello names.
    pub output_dir: Option<PathBuf>,
    /// Also write each report as an HTML page beside its JSON (`X.json` → `X.html`; set by
    /// `GPUSHIM_HTML=1`).
    pub html: bool,
    /// Sample the driver's view of the target's device memory (NVML, [`crate::nvml`]) while
    /// the stream is read: only when the target is running, not for a recorded stream.
    pub sample_driver: bool,
    /// Rolling reports of a long run (`GPUSHIM_REPORT_INTERVAL`), if asked for.
    pub interval: Option<Intervals>,
    /// Serve Prometheus metrics while the stream is read (`GPUSHIM_METRICS`, [`crate::metrics`]).
    pub metrics: Option<crate::metrics::Config>,
    /// The reorder buffer's bound, bytes (`GPUSHIM_REORDER_MIB`; `None`:
    /// [`crate::reorder::DEFAULT_REORDER_BYTES`]).
    pub reorder_bytes: Option<usize>,
    /// The most sites (distinct stacks) kept (`GPUSHIM_MAX_STACKS`; `None`:
    /// [`crate::live::DEFAULT_MAX_STACKS`]); see [`State::set_max_stacks`](crate::live::State::set_max_stacks).
    pub max_stacks: Option<usize>,
}

/// At most this many thread names are kept (a long-running service may start threads without
/// end); the threads of later `ThreadName` events are reported by id only.
pub const MAX_THREAD_NAMES: usize = 10_000;

/// At most this many notes of the stream are kept; later ones are counted in one more note.
pub const MAX_NOTES: usize = 1000;

/// Rolling reports: `gpushim-<pid>-interval-<n>.json` (the stem of `crate::identity`), the
/// live set as applied so far, written at the first event whose time (the target's monotonic
/// clock) is at least `every_ns` after the previous interval report (after the first event, for
/// the first); only the latest `keep` files are kept, older ones are removed. A process that
/// makes no allocation or free in an interval writes nothing for it: its live set did not
/// change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Intervals {
    /// Time between reports, ns.
    pub every_ns: u64,
    /// How many of the latest interval reports are kept (at least 1).
    pub keep: usize,
}

/// Interval reports kept when `GPUSHIM_REPORT_KEEP` is not set.
pub const DEFAULT_KEEP: usize = 3;

/// What a collection produced.
#[derive(Debug)]
pub struct Outcome {
    /// The final report's path; `None` only for an empty stream (nothing to report).
    pub report: Option<PathBuf>,
    /// Snapshot files written, in order.
    pub snapshots: Vec<PathBuf>,
    /// Out-of-memory reports written, in order.
    pub ooms: Vec<PathBuf>,
    /// Why the stream broke, if it did (the report holds what came before).
    pub broken: Option<String>,
}

/// Everything besides the live set that reports need, and where they go.
struct Sink<'a> {
    hello: Hello,
    out_dir: PathBuf,
    html: bool,
    sym: Symbolizer,
    stacks: HashMap<u32, Vec<u64>>,
    /// Each thread's name from its first event, by kernel thread id.
    thread_names: HashMap<u32, String>,
    notes: Vec<String>,
    mem_info: BTreeMap<i32, MemInfo>,
    snapshots: Vec<PathBuf>,
    /// Recent MemInfo events, to find the one sent with an out-of-memory failure.
    mem_log: MemInfoLog,
    /// Out-of-memory failures applied so far.
    oom_count: u32,
    ooms: Vec<PathBuf>,
    /// Sequence numbers given up as lost so far (as of the latest event pushed).
    lost: u64,
    /// The heap walk of the final report, attributed when it arrived (before `Exit`).
    exit_holders: Option<Holders>,
    /// Heap walks received.
    walks: u32,
    /// Labels of snapshots asked for through the API, by snapshot number.
    labels: HashMap<u32, String>,
    /// Where API snapshots are answered (the socket back to the shim).
    answers: &'a mut dyn Write,
    /// NVML sampling of the target, when asked for.
    sampler: Option<crate::nvml::Sampler>,
    /// The driver's view as of the latest report.
    driver: Option<crate::nvml::DriverView>,
    /// When the program's own work ended (monotonic ns): the start of the exit heap walk, or
    /// of an earlier pause of the tool's own (a snapshot's heap walk or reachability scan) after
    /// which the program allocated and freed nothing more. The growth tests end there: seconds
    /// spent walking or scanning a large heap must not read as a leak that stopped.
    work_end: Option<u64>,
    /// The start of the first such pause since the program's last allocation or free.
    pause_start: Option<u64>,
    /// The process's place in its job (the stream's `Identity` event), if any.
    identity: Option<Identity>,
    /// The machine's GPU behind each device ordinal (`DeviceInfo` events), by ordinal.
    physical: BTreeMap<i32, PhysicalDevice>,
    /// Interval reports written so far, and the paths of those kept (oldest first).
    intervals: u32,
    interval_files: std::collections::VecDeque<PathBuf>,
    /// The reachability scan of the final report (it arrives before `Exit`), classified with
    /// the final report once the stream is read.
    exit_reach: Option<Reach>,
    err: &'a mut dyn Write,
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
struct Ending {
    reason: Reason,
    snapshot: Option<u32>,
    end_ts_ns: u64,
    lost_events: u64,
    notes: Vec<String>,
    work_end_ns: Option<u64>,
}

impl Ending {
    /// A report that is not a snapshot and does not know when the program's work ended.
    fn now(reason: Reason, end_ts_ns: u64, lost_events: u64, notes: Vec<String>) -> Ending {
        Ending { reason, snapshot: None, end_ts_ns, lost_events, notes, work_end_ns: None }
    }
}

impl Sink<'_> {
    /// The report of `state` that `e` describes, with the stream's identity and GPUs: what the
    /// snapshot, out-of-memory, interval and final reports share.
    fn build_report(&mut self, state: &State, e: Ending) -> Report {
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
        };
        let mut report = assemble::build(state, ctx, &mut self.sym);
        self.annotate(&mut report);
        report
    }

    /// Adds what the stream said about the process (its job identity) and its GPUs to a report.
    fn annotate(&self, report: &mut Report) {
        report.identity = self.identity.clone();
        report.physical_devices = self.physical.values().cloned().collect();
    }

    /// The stem of this process's report files (`gpushim-<pid>`, or with its rank).
    fn stem(&self) -> String {
        identity::stem(self.hello.pid, self.identity.as_ref())
    }

    /// A heap walk's result: attributed to the live set as it is now (the walk saw the objects
    /// then); written beside its snapshot or out-of-memory report at once, kept for the end for
    /// the final report.
    fn heap_walk(&mut self, h: &HeapWalk, state: &State) {
        self.walks += 1;
        if h.reason != WalkReason::Exit {
            self.pause_start.get_or_insert(h.ts_ns);
        }
        let holders = holders::attribute(h, state, self.hello.pid);
        let stem = match h.reason {
            WalkReason::Exit => {
                self.work_end = Some(self.pause_start.map_or(h.ts_ns, |p| p.min(h.ts_ns)));
                self.exit_holders = Some(holders);
                return;
            }
            WalkReason::Snapshot => format!("{}.holders", self.snapshot_stem(h.number)),
            WalkReason::Oom => format!("{}-oom-{}.holders", self.stem(), h.number),
        };
        match write_json(&holders, &self.out_dir, &stem, self.err) {
            Ok(path) => {
                // Said for snapshots by signal; an API snapshot's caller finds it beside its file.
                if h.reason != WalkReason::Snapshot || !self.labels.contains_key(&h.number) {
                    let _ =
                        writeln!(self.err, "gpushim: {}; holders written to {}", holders.walk.message, path.display());
                }
            }
            Err(e) => {
                let _ = writeln!(self.err, "gpushim: cannot write {stem}.json: {e:#}");
            }
        }
    }

    /// A reachability scan: classified against the live set as it is now (the scan saw memory
    /// then); written beside its snapshot or out-of-memory report at once
    /// (`…-snapshot-N.reach.json`), kept for the end for the final report.
    fn reach(&mut self, r: &Reach, state: &State) {
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
        match write_json(&file, &self.out_dir, &stem, self.err) {
            Ok(path) if reach::worth_a_line(&file.reachability) => {
                let lead = reach::lead_line(&file.reachability).map(|l| format!("{l}; ")).unwrap_or_default();
                let _ = writeln!(
                    self.err,
                    "gpushim: {lead}{}; written to {}",
                    reach::scan_line(&file.reachability),
                    path.display()
                );
            }
            Ok(_) => {}
            Err(e) => {
                let _ = writeln!(self.err, "gpushim: cannot write {stem}.json: {e:#}");
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
                    self.err,
                    "gpushim: out of memory again ({what}); no more out-of-memory reports are \
                     written (at most {MAX_OOM_REPORTS}), the final report counts them"
                );
            }
            return;
        }
        self.driver = self.sampler.as_ref().map(crate::nvml::Sampler::view_now);
        let ending = Ending::now(Reason::Oom, f.ts_ns, self.lost, self.notes.clone());
        let mut report = self.build_report(state, ending);
        let frames = match self.stacks.get(&f.stack) {
            Some(addrs) => self.sym.stack_of(f.stack, addrs),
            None => Vec::new(),
        };
        let start = state.first_ts_ns.unwrap_or(f.ts_ns).min(f.ts_ns);
        report.oom = Some(oom::record(f, self.mem_log.for_failure(f), start, frames));
        let stem = format!("{}-oom-{n}", self.stem());
        match write_report(&report, &self.out_dir, &stem, self.err) {
            Ok(path) => {
                let _ =
                    writeln!(self.err, "gpushim: out of memory: {what} failed; report written to {}", path.display());
                if self.html {
                    write_html(&report, &path, self.err);
                }
                self.ooms.push(path);
            }
            Err(e) => {
                let _ = writeln!(self.err, "gpushim: out of memory: {what} failed; cannot write its report: {e:#}");
            }
        }
    }

    /// Writes interval report number `intervals + 1` of `state` (its latest event at `ts_ns`),
    /// then removes the oldest kept one beyond `keep`. Failures are said on stderr once each and
    /// collection goes on.
    fn interval(&mut self, state: &State, ts_ns: u64, keep: usize) {
        self.intervals += 1;
        let n = self.intervals;
        self.driver = self.sampler.as_ref().map(crate::nvml::Sampler::view_now);
        let ending = Ending::now(Reason::Interval, ts_ns, self.lost, self.notes.clone());
        let mut report = self.build_report(state, ending);
        report.interval = Some(n);
        let stem = format!("{}-interval-{n}", self.stem());
        match write_report(&report, &self.out_dir, &stem, self.err) {
            Ok(path) => self.interval_files.push_back(path),
            Err(e) => {
                let _ = writeln!(self.err, "gpushim: cannot write interval report {n}: {e:#}");
            }
        }
        while self.interval_files.len() > keep.max(1) {
            if let Some(old) = self.interval_files.pop_front() {
                let _ = std::fs::remove_file(old);
            }
        }
    }

    /// Writes one snapshot report and says where on stderr; a failure to write is reported
    /// and collection goes on.
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
                crate::words::count(p.missing, "event")
            ));
        }
        self.driver = self.sampler.as_ref().map(crate::nvml::Sampler::view_now);
        let ending = Ending { snapshot: Some(p.number), ..Ending::now(Reason::Snapshot, p.ts_ns, p.missing, notes) };
        let mut report = self.build_report(state, ending);
        let label = self.labels.get(&p.number).cloned();
        report.label = label.clone().filter(|l| !l.is_empty());
        let stem = self.snapshot_stem(p.number);
        let written = write_report(&report, &self.out_dir, &stem, self.err);
        match &written {
            Ok(path) => {
                // An API snapshot's caller gets the path back: no line for it.
                if label.is_none() {
                    let _ = writeln!(self.err, "gpushim: snapshot {} written to {}", p.number, path.display());
                }
                if self.html {
                    write_html(&report, path, self.err);
                }
                self.snapshots.push(path.clone());
            }
            Err(e) => {
                let _ = writeln!(self.err, "gpushim: cannot write snapshot {}: {e:#}", p.number);
            }
        }
        if label.is_some() {
            self.answer(p.number, written.as_ref().map_err(|e| format!("{e:#}")));
        }
    }

    /// The file name (without `.json`) of snapshot `n`: `gpushim-[rankR-]PID-snapshot-N`, and
    /// `-LABEL` after it for a labelled API snapshot.
    fn snapshot_stem(&self, n: u32) -> String {
        match self.labels.get(&n).filter(|l| !l.is_empty()) {
            Some(l) => format!("{}-snapshot-{n}-{l}", self.stem()),
            None => format!("{}-snapshot-{n}", self.stem()),
        }
    }

    /// Tells the shim that API snapshot `n` is written (one line, `snapshot N PATH`) or why
    /// not (`snapshot N !WHY`). A path holding a newline cannot be said on one line: its
    /// snapshot is answered as not written. Errors are ignored: the program may be gone.
    fn answer(&mut self, n: u32, written: Result<&PathBuf, String>) {
        use std::os::unix::ffi::OsStrExt;
        let mut line = format!("snapshot {n} ").into_bytes();
        match written {
            Ok(p) if !p.as_os_str().as_bytes().contains(&b'\n') => line.extend_from_slice(p.as_os_str().as_bytes()),
            Ok(_) => line.extend_from_slice(b"!the snapshot's path holds a newline"),
            Err(e) => {
                line.push(b'!');
                line.extend(e.bytes().map(|b| if b == b'\n' { b' ' } else { b }));
            }
        }
        line.push(b'\n');
        let _ = self.answers.write_all(&line).and_then(|()| self.answers.flush());
    }
}

/// Serializes `report` and writes it as `stem.json` (or the next free name) in `dir`, with
/// the fallbacks of [`output::write_new`]; tells `err` where it went if not where asked.
fn write_report(report: &Report, dir: &Path, stem: &str, err: &mut dyn Write) -> Result<PathBuf> {
    write_json(report, dir, stem, err)
}

/// Writes `report` as an HTML page beside its JSON file `json` (`X.json` → `X.html`, or the next
/// free name); a failure is said on `err` and is no error of the collection.
fn write_html(report: &Report, json: &Path, err: &mut dyn Write) {
    let dir = json.parent().unwrap_or(Path::new("."));
    let stem = json.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let page = crate::render::html::Html;
    match output::write_new_with(dir, &stem, "html", &mut |out| crate::render::Render::render(&page, report, out)) {
        Ok(w) => {
            for m in w.messages() {
                let _ = writeln!(err, "gpushim: {m}");
            }
            let _ = writeln!(err, "gpushim: HTML report written to {}", w.path.display());
        }
        Err(e) => {
            let _ = writeln!(err, "gpushim: cannot write {stem}.html: {e:#}");
        }
    }
}

/// As [`write_report`], for any document.
fn write_json<T: serde::Serialize>(doc: &T, dir: &Path, stem: &str, err: &mut dyn Write) -> Result<PathBuf> {
    let w = output::write_new_with(dir, stem, "json", &mut |out| {
        crate::json::to_writer(out, doc)?;
        out.write_all(b"\n")
    })?;
    for m in w.messages() {
        let _ = writeln!(err, "gpushim: {m}");
    }
    Ok(w.path)
}

/// The collector's state that metrics read besides the live set ([`crate::metrics::Sources`]),
/// borrowed field by field from a `Sink`.
macro_rules! metrics_sources {
    ($sink:expr) => {
        crate::metrics::Sources {
            sym: &mut $sink.sym,
            stacks: &$sink.stacks,
            physical: &$sink.physical,
            identity: $sink.identity.as_ref(),
            lost: $sink.lost,
        }
    };
}

/// Reads a whole event stream from `input`, writes snapshots and the final report, and prints
/// the closing summary on `err`.
///
/// # Errors
/// If the stream breaks before its first event (there is no pid or output directory to write
/// a report for), or no directory would take the final report. A break after the Hello event
/// is not an error: it is returned in [`Outcome::broken`] after the report is written.
pub fn collect(input: impl Read, opts: &Options, err: &mut dyn Write) -> Result<Outcome> {
    collect_with(input, opts, err, &mut std::io::sink(), &mut || {})
}

/// As [`collect`], answering each snapshot asked for through the shim's C API (the wire
/// event `ApiSnapshot`) on `answers` once its file is written: one line, `snapshot N PATH`, or
/// `snapshot N !WHY` when it could not be written.
///
/// # Errors
/// Those of [`collect`].
pub fn collect_answering(
    input: impl Read,
    opts: &Options,
    err: &mut dyn Write,
    answers: &mut dyn Write,
) -> Result<Outcome> {
    collect_with(input, opts, err, answers, &mut || {})
}

/// As [`collect_answering`], calling `stream_read` once the whole stream is read and applied
/// to the live set, before the final report is built and written: `gpushim collect` confirms
/// the end of the stream to the shim there (after any answers), so that the program's exit
/// waits only for the stream to be read, not for symbolization and the report.
///
/// # Errors
/// Those of [`collect`].
pub fn collect_with(
    input: impl Read,
    opts: &Options,
    err: &mut dyn Write,
    answers: &mut dyn Write,
    stream_read: &mut dyn FnMut(),
) -> Result<Outcome> {
    let mut input = BufReader::with_capacity(1 << 16, input);
    if input.fill_buf().context("reading the event stream")?.is_empty() {
        // The target exited (or the shim gave up) before saying anything: nothing to report.
        return Ok(Outcome { report: None, snapshots: Vec::new(), ooms: Vec::new(), broken: None });
    }
    let mut dec = Decoder::new(input)
        .map_err(|e| coded(BROKEN_STREAM, format!("event stream broken at its start: {e}; no report written")))?;
    let hello = match dec.next_event() {
        Ok(Some(Event::Hello(h))) => h,
        Ok(Some(_)) => {
            return Err(coded(BROKEN_STREAM, "event stream does not start with a Hello event; no report written"))
        }
        Ok(None) => return Err(coded(BROKEN_STREAM, "event stream ended before its Hello event; no report written")),
        Err(e) => {
            return Err(coded(BROKEN_STREAM, format!("event stream broken at its start: {e}; no report written")))
        }
    };
    let out_dir = match &opts.output_dir {
        Some(d) => d.clone(),
        None => output_dir_of(&hello),
    };
    let mut sink = Sink {
        hello,
        out_dir,
        html: opts.html,
        sym: Symbolizer::new(),
        stacks: HashMap::new(),
        thread_names: HashMap::new(),
        notes: Vec::new(),
        mem_info: BTreeMap::new(),
        snapshots: Vec::new(),
        mem_log: MemInfoLog::default(),
        oom_count: 0,
        ooms: Vec::new(),
        lost: 0,
        exit_holders: None,
        exit_reach: None,
        walks: 0,
        labels: HashMap::new(),
        answers,
        sampler: None,
        driver: None,
        work_end: None,
        pause_start: None,
        identity: None,
        physical: BTreeMap::new(),
        intervals: 0,
        interval_files: std::collections::VecDeque::new(),
        err,
    };
    if opts.sample_driver {
        sink.sampler = Some(crate::nvml::Sampler::start(sink.hello.pid));
    }
    let mut metrics = opts.metrics.clone().map(crate::metrics::Publisher::new);
    let mut tracker = Tracker::with_bound(opts.reorder_bytes.unwrap_or(crate::reorder::DEFAULT_REORDER_BYTES));
    tracker.state_mut().set_max_stacks(opts.max_stacks.unwrap_or(0));
    let mut dropped_notes = 0u64;
    let mut exit_ts: Option<u64> = None;
    // The target time at which the next interval report is due (set at the first timed event).
    let mut interval_due: Option<u64> = None;
    let broken = loop {
        let ev = match dec.next_event() {
            Ok(Some(ev)) => ev,
            Ok(None) => break None,
            Err(e) => break Some(e.to_string()),
        };
        let ts = match &ev {
            Event::Alloc(a) => Some(a.ts_ns),
            Event::Free(f) => Some(f.ts_ns),
            Event::Failed(f) => Some(f.ts_ns),
            _ => None,
        };
        // The program allocated or freed after a pause of the tool's: its work went on.
        if let (Some(t), Some(p)) = (ts, sink.pause_start) {
            if t > p {
                sink.pause_start = None;
            }
        }
        match ev {
            Event::Alloc(a) => tracker.push(Op::Alloc(a), &mut sink),
            Event::Free(f) => tracker.push(Op::Free(f), &mut sink),
            Event::Failed(f) => tracker.push(Op::Failed(f), &mut sink),
            Event::FreePending(f) => tracker.push(Op::FreePending(f), &mut sink),
            Event::Reset(r) => tracker.push(Op::Reset(r), &mut sink),
            Event::ContextCreated(c) => tracker.push(Op::ContextCreated(c), &mut sink),
            Event::Map(m) => tracker.push(Op::Map(m), &mut sink),
            Event::Unmap(u) => tracker.push(Op::Unmap(u), &mut sink),
            Event::HandleRef(h) => tracker.push(Op::HandleRef(h), &mut sink),
            Event::GraphNode(n) => tracker.push(Op::GraphNode(Box::new(n)), &mut sink),
            Event::GraphExec(x) => tracker.push(Op::GraphExec(Box::new(x)), &mut sink),
            Event::GraphLaunch(l) => tracker.push(Op::GraphLaunch(l), &mut sink),
            Event::GraphExecDestroy(d) => tracker.push(Op::GraphExecDestroy(d), &mut sink),
            Event::GraphMemTrim(t) => tracker.push(Op::GraphMemTrim(t), &mut sink),
            Event::Snapshot(s) => tracker.request_snapshot(s.boundary, s.ts_ns, &mut sink),
            Event::ApiSnapshot(s) => {
                // Labelled before the request: the snapshot may be written at once.
                let n = tracker.requested() + 1;
                sink.labels.insert(n, sanitize_label(&s.label));
                tracker.request_snapshot(s.boundary, s.ts_ns, &mut sink);
            }
            Event::Exit(x) => exit_ts = Some(x.ts_ns),
            Event::Module(m) => sink.sym.add_module(m),
            Event::Stack(s) => {
                sink.stacks.insert(s.id, s.frames);
            }
            Event::MemInfo(m) => {
                sink.mem_log.push(m.clone());
                sink.mem_info.insert(m.device, m);
            }
            Event::Note(n) if sink.notes.len() < MAX_NOTES => sink.notes.push(n),
            Event::Note(_) => dropped_notes += 1,
            Event::PyRuntime(p) => sink.sym.python_mut().set_runtime(p.version),
            Event::PyCode(c) => sink.sym.python_mut().add_code(c),
            Event::PyStack(s) => sink.sym.python_mut().add_stack(s),
            Event::HeapWalk(h) => {
                sink.heap_walk(&h, tracker.state());
                if h.reason == WalkReason::Exit {
                    // What is freed from the walk's start on, the interpreter's teardown freed.
                    tracker.state_mut().teardown_from_ns = Some(h.ts_ns);
                }
            }
            Event::ThreadName(t) => {
                if sink.thread_names.len() < MAX_THREAD_NAMES {
                    sink.thread_names.entry(t.tid).or_insert(t.name);
                }
            }
            Event::DeviceInfo(d) => {
                sink.physical.insert(d.ordinal, identity::physical_device(&d));
            }
            Event::Identity(i) => sink.identity = Some(identity::from_vars(&i.vars)),
            Event::Reach(r) => sink.reach(&r, tracker.state()),
            Event::Hello(_) => sink.notes.push("the stream held a second Hello event; it was ignored".into()),
        }
        sink.lost = tracker.lost();
        if let Some(m) = metrics.as_mut() {
            if !m.started() {
                // After the Hello and, when the launcher set one, the Identity event.
                let stem = sink.stem();
                m.start(sink.hello.pid, sink.identity.as_ref(), &sink.out_dir, &stem, sink.err);
            }
            let mut src = metrics_sources!(sink);
            m.after_event(ts, tracker.state(), &mut src);
            m.caught_up(!dec.get_ref().buffer().is_empty(), tracker.state(), &mut src);
        }
        if tracker.state().has_evicted() {
            // Sites forgotten to stay within the bound: their stacks go with them.
            for id in tracker.state_mut().take_evicted() {
                sink.stacks.remove(&id);
                sink.sym.forget_stack(id);
            }
        }
        if let (Some(iv), Some(ts)) = (opts.interval, ts) {
            match interval_due {
                None => interval_due = Some(ts.saturating_add(iv.every_ns)),
                Some(due) if ts >= due => {
                    sink.interval(tracker.state(), ts, iv.keep);
                    interval_due = Some(ts.saturating_add(iv.every_ns));
                }
                Some(_) => {}
            }
        }
    };
    sink.lost = tracker.lost();
    tracker.finish(&mut sink);
    let lost = tracker.lost();
    stream_read();
    // After the program's exit is released: a last ranking and labels take their time.
    if let Some(m) = metrics.as_mut() {
        m.finish(tracker.state(), &mut metrics_sources!(sink));
    }

    let pid = sink.hello.pid;
    let mut notes = std::mem::take(&mut sink.notes);
    if dropped_notes > 0 {
        notes.push(format!("{dropped_notes} more notes of the stream were not kept (at most {MAX_NOTES})"));
    }
    if let Some(e) = &broken {
        notes.push(format!("event stream broken: {e}; the report holds what was received before"));
    }
    if lost > 0 {
        notes.push(format!("{} never arrived (gaps in the sequence numbers)", crate::words::count(lost, "event")));
    }
    if sink.oom_count > MAX_OOM_REPORTS {
        notes.push(format!(
            "{} allocations failed with out of memory; reports were written for the first \
             {MAX_OOM_REPORTS}",
            sink.oom_count
        ));
    }
    if tracker.duplicates() > 0 {
        notes.push(format!(
            "{} repeated a sequence number, or came after it was given up as lost; they were ignored",
            crate::words::count(tracker.duplicates(), "event")
        ));
    }
    if (sink.sym.python_mut().has_runtime() || sink.walks > 0) && sink.exit_holders.is_none() {
        notes.push(
            if exit_ts.is_some() {
                "no heap walk at exit: Python's atexit handlers did not run (os._exit), or GPUSHIM_HEAP_WALK=0"
            } else {
                "the process was killed: no heap walk for the final report, so who holds its memory is not known"
            }
            .to_string(),
        );
    }
    sink.driver = sink.sampler.take().map(|s| s.view_now());
    let reason = if exit_ts.is_some() { Reason::Exit } else { Reason::Killed };
    // The state's own latest event time is used if later.
    let ending = Ending {
        work_end_ns: sink.work_end.or(sink.pause_start),
        ..Ending::now(reason, exit_ts.unwrap_or(0), lost, notes)
    };
    let mut report = sink.build_report(tracker.state(), ending);
    if let Some(r) = sink.exit_reach.take() {
        let f = reach::classify(&r, tracker.state(), &sink.stacks, &mut sink.sym);
        reach::apply(&mut report, f);
    }
    if let Some(e) = &broken {
        let _ = writeln!(sink.err, "gpushim: event stream from pid {pid} broken: {e}; report holds what was received");
    }
    let path = write_report(&report, &sink.out_dir, &sink.stem(), sink.err)
        .with_context(|| format!("cannot write the report of pid {pid}"))?;
    if let Some(h) = sink.exit_holders.take() {
        let stem = format!("{}.holders", sink.stem());
        if let Err(e) = write_json(&h, &sink.out_dir, &stem, sink.err) {
            let _ = writeln!(sink.err, "gpushim: cannot write {stem}.json: {e:#}");
        }
        report.holders = Some(h);
    }
    if sink.html {
        write_html(&report, &path, sink.err);
    }
    let _ = text::summary(&report, &path, sink.err);
    Ok(Outcome { report: Some(path), snapshots: sink.snapshots, ooms: sink.ooms, broken })
}

/// A label as it may appear in a file name: the shim sends it reduced to `[A-Za-z0-9._-]`, at
/// most 64 characters, no leading dot; a stream from elsewhere is reduced the same way here.
pub fn sanitize_label(raw: &str) -> String {
    let mut out: String = raw
        .chars()
        .take(64)
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') { c } else { '_' })
        .collect();
    if out.starts_with('.') {
        out.replace_range(..1, "_");
    }
    out
}

/// Where the target wants reports: Hello's output directory, relative to its working
/// directory if relative, else its working directory, else ours.
fn output_dir_of(h: &Hello) -> PathBuf {
    let cwd = Path::new(&h.cwd);
    let dir = if h.output_dir.is_empty() { cwd } else { Path::new(&h.output_dir) };
    if dir.as_os_str().is_empty() {
        PathBuf::from(".")
    } else if dir.is_relative() && cwd.is_absolute() {
        cwd.join(dir)
    } else {
        dir.to_path_buf()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::tests::TempDir;
    use crate::report::Report;
    use gpushim_testkit::{alloc, failed, free, stream_of, MS};
    use gpushim_wire::{encode, write_header, Exit, Snapshot, Stack, NO_STACK};

    /// The stream's Hello: pid 4242 running `./render --frames 30`, reports into `dir`.
    fn hello(dir: &Path) -> Event {
        gpushim_testkit::hello(dir, &["./render", "--frames", "30"])
    }

    /// The events of a "render loop": stack 0 leaks 1 MiB every 10 ms (30 times), stack 1
    /// allocates and frees a scratch buffer each frame; a snapshot with boundary 30 (the first
    /// ten frames) is requested before all of their events have arrived; events of every other
    /// frame are delivered out of order. Ends with an allocation without a stack, a note and
    /// (if `exit`) the exit event.
    fn events(dir: &Path, exit: bool) -> Vec<Event> {
        let mut ev = vec![hello(dir)];
        let here = crate::symbolize::tests::module_holding(events as *const () as usize as u64);
        let ret = events as *const () as usize as u64 + 1;
        ev.push(Event::Module(here));
        ev.push(Event::Stack(Stack { id: 0, frames: vec![ret, 0x10] }));
        ev.push(Event::Stack(Stack { id: 1, frames: vec![] }));
        let mut seq = 0;
        for i in 0..30u64 {
            let t = 10 * MS * (i + 1);
            let mut f = vec![
                alloc(seq, t, 0x7000_0000 + i * 0x10_0000, 1 << 20, 0),
                alloc(seq + 1, t + 1, 0x9000_0000, 4096, 1),
                free(seq + 2, t + 2, 0x9000_0000),
            ];
            seq += 3;
            if i % 2 == 1 {
                f.reverse();
            }
            if i == 9 {
                // Seqs 0..27 are applied; 27..30 arrive after the request.
                ev.push(Event::Snapshot(Snapshot { boundary: 30, ts_ns: 95 * MS }));
            }
            ev.extend(f);
        }
        ev.push(alloc(seq, 400 * MS, 0xab00, 10, NO_STACK));
        ev.push(Event::Note("shim: 0 events lost".into()));
        if exit {
            ev.push(Event::Exit(Exit { ts_ns: 400 * MS }));
        }
        ev
    }

    fn stream(dir: &Path, exit: bool) -> Vec<u8> {
        stream_of(&events(dir, exit))
    }

    /// An API snapshot (labelled, and one unlabelled) is written with its label in the report
    /// and the file name, answered on the answers stream with its path, in the order written,
    /// and not said on stderr; a label from elsewhere is reduced to file-name characters.
    #[test]
    fn api_snapshots_are_labelled_and_answered() {
        use gpushim_wire::ApiSnapshot;
        let d = TempDir::new("collect-api");
        let ev = vec![
            hello(&d.0),
            alloc(0, MS, 0x7000_0000, 1 << 20, NO_STACK),
            // Answered only once seq 1 has arrived.
            Event::ApiSnapshot(ApiSnapshot { boundary: 2, ts_ns: 2 * MS, label: "../after one".into() }),
            alloc(1, 2 * MS, 0x7100_0000, 2 << 20, NO_STACK),
            Event::ApiSnapshot(ApiSnapshot { boundary: 2, ts_ns: 3 * MS, label: String::new() }),
            Event::Snapshot(Snapshot { boundary: 2, ts_ns: 4 * MS }),
            Event::Exit(Exit { ts_ns: 5 * MS }),
        ];
        let (mut err, mut answers) = (Vec::new(), Vec::new());
        let out = collect_answering(&stream_of(&ev)[..], &Options::default(), &mut err, &mut answers).unwrap();
        let first = d.0.join("gpushim-4242-snapshot-1-_._after_one.json");
        let second = d.0.join("gpushim-4242-snapshot-2.json");
        let third = d.0.join("gpushim-4242-snapshot-3.json");
        assert_eq!(out.snapshots, vec![first.clone(), second.clone(), third.clone()]);
        let want = format!("snapshot 1 {}\nsnapshot 2 {}\n", first.display(), second.display());
        assert_eq!(String::from_utf8(answers).unwrap(), want);
        let r = Report::read(&first).unwrap();
        assert_eq!((r.snapshot, r.label.as_deref()), (Some(1), Some("_._after_one")));
        assert_eq!(r.totals.live_bytes, 3 << 20);
        assert_eq!(Report::read(&second).unwrap().label, None);
        let err = String::from_utf8(err).unwrap();
        assert!(!err.contains("snapshot 1 written") && !err.contains("snapshot 2 written"), "{err}");
        assert!(err.contains("snapshot 3 written"), "{err}");
    }

    #[test]
    fn end_to_end_with_snapshot() {
        let d = TempDir::new("collect");
        let mut err = Vec::new();
        let out = collect(&stream(&d.0, true)[..], &Options::default(), &mut err).unwrap();
        let err = String::from_utf8(err).unwrap();
        assert!(out.broken.is_none());
        let path = out.report.unwrap();
        assert_eq!(path, d.0.join("gpushim-4242.json"));
        assert_eq!(out.snapshots, vec![d.0.join("gpushim-4242-snapshot-1.json")]);

        let r = Report::read(&path).unwrap();
        assert_eq!(r.reason, Reason::Exit);
        assert_eq!(r.snapshot, None);
        assert_eq!(r.command, vec!["./render", "--frames", "30"]);
        assert_eq!(r.totals.live_count, 31);
        assert_eq!(r.totals.live_bytes, 30 * (1 << 20) + 10);
        assert_eq!(r.totals.alloc_count, 61);
        assert_eq!(r.totals.free_count, 30);
        assert_eq!(r.totals.unknown_free_count, 0);
        assert_eq!(r.totals.lost_events, 0);
        assert_eq!(r.kinds.device.live_bytes, 30 * (1 << 20) + 10);
        assert_eq!(r.kinds.managed.live_count, 0);
        assert_eq!(r.devices.len(), 1);
        assert!((r.duration_s - 0.39).abs() < 1e-9, "{}", r.duration_s);
        assert_eq!(r.sites.iter().map(|s| s.id).collect::<Vec<_>>(), vec![0, NO_STACK, 1]);
        let leak = &r.sites[0];
        assert_eq!((leak.live_count, leak.alloc_count, leak.free_count), (30, 30, 0));
        assert_eq!(leak.apis, vec!["cudaMalloc"]);
        assert!(leak.frames[0].function.ends_with("collect::tests::events"), "{:?}", leak.frames[0]);
        assert_eq!(leak.frames.last().unwrap().module, "");
        assert_eq!(r.suspects.len(), 1);
        assert_eq!(r.suspects[0].site, 0);
        assert_eq!(r.notes, vec!["shim: 0 events lost".to_string()]);

        let s = Report::read(&out.snapshots[0]).unwrap();
        assert_eq!((s.reason, s.snapshot), (Reason::Snapshot, Some(1)));
        assert_eq!((s.totals.live_count, s.totals.live_bytes), (10, 10 << 20));
        assert_eq!((s.totals.alloc_count, s.totals.free_count), (20, 10));

        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(
            lines[0],
            format!("gpushim: snapshot 1 written to {}", d.0.join("gpushim-4242-snapshot-1.json").display())
        );
        assert_eq!(
            lines[1],
            "gpushim: pid 4242 (exit): 31 allocations live, 30.0 MiB (device 30.0 MiB on GPU 0); peak 30.0 MiB"
        );
        // A recorded stream: NVML was not sampled.
        assert_eq!(
            lines[2],
            "gpushim: GPU 0 memory: user code (direct calls) 30.0 MiB; untraced unknown: the driver's view was not sampled (stream read from a file)"
        );
        assert!(
            lines[3].starts_with(
                "gpushim: suspect #1 site 0: +1.0 MiB per 10 ms over 290 ms, 30 live (30.0 MiB), none freed"
            ),
            "{}",
            lines[3]
        );
        assert!(lines[3].contains(" at gpushim_collector::collect::tests::events (src/collect.rs:"), "{}", lines[3]);
        assert_eq!(lines[4], format!("gpushim: report written to {}", path.display()));
        assert_eq!(lines.len(), 5);

        // A second run does not overwrite.
        let mut err = Vec::new();
        let out = collect(&stream(&d.0, false)[..], &Options::default(), &mut err).unwrap();
        assert_eq!(out.report.unwrap(), d.0.join("gpushim-4242.1.json"));
        let err = String::from_utf8(err).unwrap();
        assert!(err.contains(&format!("{} already exists; wrote", d.0.join("gpushim-4242.json").display())), "{err}");
        assert!(err.contains("(killed)"), "{err}");
    }

    #[test]
    fn truncated_stream_still_writes_a_report() {
        let d = TempDir::new("trunc");
        let ev = events(&d.0, true);
        let n = ev.len();
        // Cut in the middle of the last allocation (the one without a stack).
        let mut cut = stream_of(&ev[..n - 3]);
        let mut last = Vec::new();
        encode(&ev[n - 3], &mut last);
        cut.extend_from_slice(&last[..20]);
        let mut err = Vec::new();
        let out = collect(&cut[..], &Options::default(), &mut err).unwrap();
        let err = String::from_utf8(err).unwrap();
        assert_eq!(out.broken.as_deref(), Some("event stream ends in the middle of a frame"));
        let r = Report::read(&out.report.unwrap()).unwrap();
        assert_eq!(r.reason, Reason::Killed);
        assert_eq!(r.totals.alloc_count, 60);
        assert_eq!(r.totals.live_count, 30);
        assert_eq!(
            r.notes,
            vec!["event stream broken: event stream ends in the middle of a frame; the report holds what was received before"]
        );
        assert!(
            err.contains("gpushim: event stream from pid 4242 broken: event stream ends in the middle of a frame; report holds what was received\n"),
            "{err}"
        );

        // Garbage after valid events: same, here into an overriding output directory.
        let mut g = stream_of(&ev[..n - 3]);
        g.extend_from_slice(&[0xff; 64]);
        let sub = d.0.join("sub");
        std::fs::create_dir(&sub).unwrap();
        let mut err = Vec::new();
        let out = collect(&g[..], &Options { output_dir: Some(sub.clone()), ..Options::default() }, &mut err).unwrap();
        assert_eq!(out.broken.as_deref(), Some("frame length 4294967295 is out of range"));
        assert_eq!(out.report.unwrap(), sub.join("gpushim-4242.json"));
    }

    #[test]
    fn stream_broken_before_hello_is_an_error_and_empty_is_nothing() {
        let mut err = Vec::new();
        let e = collect(&b"NOTGPUSHIM\0\0\0\0"[..], &Options::default(), &mut err).unwrap_err();
        assert!(format!("{e:#}").contains("bad magic"), "{e:#}");
        let out = collect(&b""[..], &Options::default(), &mut err).unwrap();
        assert!(out.report.is_none() && out.broken.is_none());
        let mut buf = Vec::new();
        write_header(&mut buf);
        encode(&Event::Exit(Exit { ts_ns: 1 }), &mut buf);
        assert!(collect(&buf[..], &Options::default(), &mut err).is_err());
    }

    /// Six allocations, the fourth freed, then an allocation that fails with out of memory
    /// (its MemInfo just before it), delivered before two events that precede it in sequence;
    /// then more allocations, another failure of another kind (result 1: no report), and six
    /// more out-of-memory failures, of which only the next four get a report.
    #[test]
    fn out_of_memory_writes_a_report_of_that_moment() {
        let d = TempDir::new("oom");
        let here = crate::symbolize::tests::module_holding(events as *const () as usize as u64);
        let ret = events as *const () as usize as u64 + 1;
        let mut ev = vec![
            hello(&d.0),
            Event::Module(here),
            Event::Stack(Stack { id: 0, frames: vec![] }),
            Event::Stack(Stack { id: 5, frames: vec![ret] }),
        ];
        for i in 0..6u64 {
            ev.push(alloc(i, (i + 1) * MS, 0x1000 * (i + 1), 1 << 20, 0));
        }
        // seq 6 frees the fourth; 7 and 8 arrive after the failure (seq 9).
        ev.push(free(6, 7 * MS, 0x4000));
        ev.push(Event::MemInfo(MemInfo { ts_ns: 10 * MS, device: 0, free: 123 << 20, total: 80 << 30 }));
        ev.push(failed(9, 10 * MS, 8 << 30, 5, 2));
        ev.push(alloc(8, 9 * MS, 0x8000, 2 << 20, 0));
        ev.push(alloc(7, 8 * MS, 0x7000, 1 << 20, 0));
        ev.push(alloc(10, 11 * MS, 0x9000, 1 << 20, 0));
        ev.push(failed(11, 12 * MS, 1, 5, 1));
        for i in 0..6u64 {
            ev.push(failed(12 + i, (13 + i) * MS, 16 << 30, 5, 2));
        }
        ev.push(Event::Exit(Exit { ts_ns: 20 * MS }));
        let mut err = Vec::new();
        let out = collect(&stream_of(&ev)[..], &Options::default(), &mut err).unwrap();
        let err = String::from_utf8(err).unwrap();
        assert_eq!(out.ooms.len(), MAX_OOM_REPORTS as usize, "{err}");
        assert_eq!(out.ooms[0], d.0.join("gpushim-4242-oom-1.json"));
        assert_eq!(out.ooms[4], d.0.join("gpushim-4242-oom-5.json"));
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(
            lines[0],
            format!(
                "gpushim: out of memory: cudaMalloc of 8.0 GiB on GPU 0 failed; report written to {}",
                out.ooms[0].display()
            )
        );
        assert_eq!(lines.iter().filter(|l| l.contains("no more out-of-memory reports")).count(), 1, "{err}");

        let r = Report::read(&out.ooms[0]).unwrap();
        assert_eq!(r.reason, Reason::Oom);
        assert_eq!(r.snapshot, None);
        let o = r.oom.as_ref().unwrap();
        assert_eq!((o.size, o.api.as_str(), o.kind.as_str()), (8 << 30, "cudaMalloc", "device"));
        assert_eq!((o.device, o.result, o.site), (0, 2, 5));
        assert_eq!((o.device_free_bytes, o.device_total_bytes), (Some(123 << 20), Some(80 << 30)));
        assert!((o.ts_s - 0.009).abs() < 1e-9, "{}", o.ts_s);
        assert!(o.frames[0].function.ends_with("collect::tests::events"), "{:?}", o.frames);
        // The live set as of seq 9: six allocations, one freed, two more (seqs 7, 8).
        assert_eq!(r.totals.live_count, 7);
        assert_eq!(r.totals.live_bytes, (5 + 1 + 2) << 20);
        assert_eq!(r.totals.alloc_count, 8);
        assert_eq!(r.totals.failed_count, 1);
        assert_eq!(r.failures.len(), 1);
        assert!((r.duration_s - 0.009).abs() < 1e-9, "{}", r.duration_s);
        // The failed request is on top, right after the reason.
        let text = std::fs::read_to_string(&out.ooms[0]).unwrap();
        let at = |key: &str| text.find(&format!("\n  \"{key}\": ")).unwrap();
        assert!(text.contains("\n  \"reason\": \"oom\",\n  \"oom\": {"), "{text}");
        assert!(at("oom") < at("start_unix_ns") && at("oom") < at("sites"));

        // The second report: the failure of result 1 is listed but wrote no report.
        let r2 = Report::read(&out.ooms[1]).unwrap();
        assert_eq!(r2.totals.failed_count, 3);
        assert_eq!(r2.totals.live_count, 8);
        assert_eq!(r2.oom.unwrap().size, 16 << 30);

        let fin = Report::read(&out.report.unwrap()).unwrap();
        assert_eq!(fin.reason, Reason::Exit);
        assert!(fin.oom.is_none());
        assert_eq!(fin.totals.failed_count, 8);
        assert!(
            fin.notes.contains(&format!(
                "7 allocations failed with out of memory; reports were written for the first {MAX_OOM_REPORTS}"
            )),
            "{:?}",
            fin.notes
        );
    }

    /// The render loop's stream (events 10 ms apart, one last at 400 ms) with a report every
    /// 50 ms, the latest two kept: reports at 60, 110, 160, 210, 260 and 400 ms; the files of the
    /// fifth and sixth remain, the sixth holding the 31 live allocations applied by then.
    #[test]
    fn interval_reports_roll_and_keep_the_latest() {
        let d = TempDir::new("interval");
        let opts = Options { interval: Some(Intervals { every_ns: 50 * MS, keep: 2 }), ..Options::default() };
        let mut err = Vec::new();
        let out = collect(&stream(&d.0, true)[..], &opts, &mut err).unwrap();
        let mut names: Vec<String> = std::fs::read_dir(&d.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.contains("-interval-"))
            .collect();
        names.sort();
        assert_eq!(names, ["gpushim-4242-interval-5.json", "gpushim-4242-interval-6.json"], "{:?}", out.report);
        let r = Report::read(&d.0.join("gpushim-4242-interval-6.json")).unwrap();
        assert_eq!((r.reason, r.interval, r.snapshot), (Reason::Interval, Some(6), None));
        assert_eq!((r.totals.live_count, r.totals.live_bytes), (31, 30 * (1 << 20) + 10));
        let r5 = Report::read(&d.0.join("gpushim-4242-interval-5.json")).unwrap();
        assert_eq!(r5.interval, Some(5));
        assert!(r5.totals.alloc_count < r.totals.alloc_count);
        // The final report is unchanged by them.
        assert_eq!(Report::read(&out.report.unwrap()).unwrap().totals.live_count, 31);
    }

    #[test]
    fn relative_output_dir_is_under_cwd() {
        let mut h = match hello(Path::new("out")) {
            Event::Hello(h) => h,
            _ => unreachable!(),
        };
        h.cwd = "/w".into();
        assert_eq!(output_dir_of(&h), Path::new("/w/out"));
        h.output_dir.clear();
        assert_eq!(output_dir_of(&h), Path::new("/w"));
    }

    /// A long run's bounds as the report shows them: 300 stacks (a Stack event each), each
    /// allocated and freed once except stack 0's leak, with at most 100 sites kept: 184 sites
    /// evicted and counted, their stacks gone from the stack table, the leak's site kept with
    /// its frames, totals exact; 1,010 notes keep 1,000 and say so; 10,010 thread names keep
    /// 10,000.
    #[test]
    fn a_long_runs_stacks_notes_and_thread_names_stay_bounded() {
        use gpushim_wire::ThreadName;
        let d = TempDir::new("bounds");
        let here = crate::symbolize::tests::module_holding(events as *const () as usize as u64);
        let ret = events as *const () as usize as u64 + 1;
        let mut ev = vec![hello(&d.0), Event::Module(here)];
        let mut seq = 0;
        for i in 0..300u32 {
            ev.push(Event::Stack(Stack { id: i, frames: vec![ret, u64::from(i)] }));
            let addr = 0x7000_0000 + u64::from(i) * 0x1000;
            ev.push(alloc(seq, (seq + 1) * MS, addr, 4096, i));
            seq += 1;
            if i > 0 {
                ev.push(free(seq, (seq + 1) * MS, addr));
                seq += 1;
            }
        }
        for i in 0..1010 {
            ev.push(Event::Note(format!("note {i}")));
        }
        for tid in 0..10_010 {
            ev.push(Event::ThreadName(ThreadName { tid, name: format!("t{tid}") }));
        }
        ev.push(Event::Exit(Exit { ts_ns: (seq + 2) * MS }));
        let opts = Options { max_stacks: Some(100), ..Options::default() };
        let mut err = Vec::new();
        let out = collect(&stream_of(&ev)[..], &opts, &mut err).unwrap();
        let r = Report::read(&out.report.unwrap()).unwrap();
        // Past 100 sites, down to 90 (11 at a time, since 10 is the bound's tenth): at 101,
        // 112, ..., 299 sites made: 19 times.
        assert_eq!(r.totals.evicted_stacks, 19 * 11);
        assert_eq!(r.sites.len(), 300 - 19 * 11);
        assert_eq!((r.totals.alloc_count, r.totals.free_count, r.totals.live_count), (300, 299, 1));
        let leak = r.sites.iter().find(|s| s.id == 0).unwrap();
        assert!(leak.frames[0].function.ends_with("collect::tests::events"), "{:?}", leak.frames);
        assert_eq!(r.notes.iter().filter(|n| n.starts_with("note ")).count(), MAX_NOTES);
        assert!(
            r.notes.contains(&"10 more notes of the stream were not kept (at most 1000)".to_string()),
            "{:?}",
            r.notes
        );
        let text = std::fs::read_to_string(d.0.join("gpushim-4242.json")).unwrap();
        assert!(text.contains("\"evicted_stacks\": 209"), "{}", &text[..2000]);
    }
}
