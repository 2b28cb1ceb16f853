//! The driving loop: each event of the stream applied in turn (to the live set through the
//! reorder buffer, or to what the sink knows), then the metrics, the sites evicted and the
//! interval reports; at the end of the stream the final report.

use std::io::Read;

use anyhow::Result;
use gpushim_wire::{Event, Hello, WalkReason};

use super::decode::{self, Stream};
use super::ending::{self, Watch, STOP};
use super::sink::{Ending, Sink};
use super::write::{Kind, Writer};
use super::{Options, Outcome, MAX_NOTES, MAX_THREAD_NAMES};
use crate::account::reorder::{Tracker, DEFAULT_REORDER_BYTES};
use crate::control::{self, Control, Woken};
use crate::explain::oom::MAX_OOM_REPORTS;
use crate::explain::{identity, nvml, reach};
use crate::metrics::{Publisher, Sources};
use crate::report::words;
use crate::report::Reason;

/// The collector's state that metrics read besides the live set ([`Sources`]), borrowed field
/// by field from a [`Sink`].
macro_rules! metrics_sources {
    ($sink:expr) => {
        Sources {
            sym: &mut $sink.sym,
            stacks: &$sink.stacks,
            physical: &$sink.physical,
            identity: $sink.identity.as_ref(),
            lost: $sink.lost,
        }
    };
}

/// The collector's state that the control endpoint reads besides the live set
/// ([`control::Sources`]), borrowed field by field from a [`Sink`].
macro_rules! control_sources {
    ($sink:expr) => {
        control::Sources {
            sym: &mut $sink.sym,
            stacks: &$sink.stacks,
            identity: $sink.identity.as_ref(),
            sampler: $sink.sampler.as_ref(),
        }
    };
}

/// One stream's collection under way.
pub(super) struct Drive<'a, 'o, R> {
    dec: Stream<R>,
    sink: Sink<'a>,
    tracker: Tracker,
    metrics: Option<Publisher>,
    /// The endpoint of `gpushim top`, with the descriptor the stream is read from.
    control: Option<(Control, i32)>,
    opts: &'o Options,
    /// Notes of the stream not kept (past [`MAX_NOTES`]).
    dropped_notes: u64,
    /// The time of the stream's `Exit` event, if it came.
    exit_ts: Option<u64>,
    /// The target time at which the next interval report is due (set at the first timed event).
    interval_due: Option<u64>,
    /// The program, watched while its stream is open (a live stream only).
    watch: Watch,
    /// The stop signal received before the stream's end was read ([`STOP`]; live streams).
    stop: Option<i32>,
    /// The stop signal that ended the program, as its zombie said when its stream ended
    /// without an exit event (the signal did not reach the collector: a terminal's Ctrl-C).
    died_of: Option<i32>,
}

impl<'a, 'o, R: Read> Drive<'a, 'o, R> {
    /// A collection of the stream `dec`, which `hello` opened, writing its reports through `out`.
    pub(super) fn new(dec: Stream<R>, hello: Hello, opts: &'o Options, out: Writer<'a>) -> Self {
        let mut sink = Sink::new(hello, out);
        if let Some(text) = opts.frames_in.as_ref().and_then(|p| std::fs::read_to_string(p).ok()) {
            sink.sym.preload(serde_json::from_str(&text).unwrap_or_default());
        }
        if opts.sample_driver {
            sink.sampler = Some(nvml::Sampler::start(sink.hello.pid));
        }
        let metrics = opts.metrics.clone().map(Publisher::new);
        let mut tracker = Tracker::with_bound(opts.reorder_bytes.unwrap_or(DEFAULT_REORDER_BYTES));
        tracker.state_mut().set_max_stacks(opts.max_stacks.unwrap_or(0));
        let watch = Watch::open(sink.hello.pid, opts.live);
        let control = opts.control.and_then(|fd| Some((Control::new(sink.hello.pid, &sink.hello.command)?, fd)));
        Drive {
            dec,
            sink,
            tracker,
            metrics,
            control,
            opts,
            dropped_notes: 0,
            exit_ts: None,
            interval_due: None,
            watch,
            stop: None,
            died_of: None,
        }
    }

    /// Reads the stream to its end (or its break), calls `stream_read`, and writes the final
    /// report.
    pub(super) fn run(mut self, stream_read: &mut dyn FnMut()) -> Result<Outcome> {
        let broken = loop {
            if self.control.is_some() && self.dec.get_ref().buffer().is_empty() {
                self.idle();
            }
            match self.dec.next_event() {
                Ok(Some(ev)) => self.step(ev),
                Ok(None) => break None,
                Err(e) => break Some(e.to_string()),
            }
        };
        if self.exit_ts.is_none() && self.opts.live {
            self.stop = STOP.now();
            if self.stop.is_none() && self.watch.runs_on() != Some(true) {
                self.died_of = self.watch.stop_signal();
            }
        }
        self.sink.lost = self.tracker.lost();
        self.tracker.finish(&mut self.sink);
        stream_read();
        if let Some((c, _)) = self.control.as_mut() {
            c.finish(self.tracker.state(), &mut control_sources!(self.sink));
        }
        // After the program's exit is released: a last ranking and labels take their time.
        if let Some(m) = self.metrics.as_mut() {
            m.finish(self.tracker.state(), &mut metrics_sources!(self.sink));
        }
        self.finish(broken)
    }

    /// One event: applied, then what follows every event.
    fn step(&mut self, ev: Event) {
        let ts = decode::time_of(&ev);
        // The program allocated or freed after a pause of the tool's: its work went on.
        if let (Some(t), Some(p)) = (ts, self.sink.pause_start) {
            if t > p {
                self.sink.pause_start = None;
            }
        }
        self.apply(ev);
        self.sink.lost = self.tracker.lost();
        self.publish(ts);
        if let Some((c, _)) = self.control.as_mut() {
            c.after_event(ts, self.tracker.state(), &mut control_sources!(self.sink));
            if c.requested() {
                self.snapshots_asked();
            }
        }
        self.forget_evicted();
        self.interval_report(ts);
    }

    /// Applies one event: an operation on the live set goes through the reorder buffer, the
    /// rest to the sink.
    fn apply(&mut self, ev: Event) {
        let ev = match decode::op_of(ev) {
            Ok(op) => return self.tracker.push(op, &mut self.sink),
            Err(ev) => ev,
        };
        let sink = &mut self.sink;
        match ev {
            Event::Snapshot(s) => {
                sink.number_snapshot(self.tracker.requested() + 1);
                self.tracker.request_snapshot(s.boundary, s.ts_ns, sink);
            }
            Event::ApiSnapshot(s) => {
                // Labelled before the request: the snapshot may be written at once.
                let n = self.tracker.requested() + 1;
                sink.labels.insert(n, decode::sanitize_label(&s.label));
                // Only an absolute path: the shim makes the caller's absolute.
                if s.dir.starts_with('/') {
                    sink.dirs.insert(n, std::path::PathBuf::from(&s.dir));
                }
                sink.number_snapshot(n);
                self.tracker.request_snapshot(s.boundary, s.ts_ns, sink);
            }
            Event::Exit(x) => {
                self.exit_ts = Some(x.ts_ns);
                self.stop = self.stop.or_else(|| self.opts.live.then(|| STOP.now()).flatten());
            }
            Event::Module(m) => sink.sym.add_module(m),
            Event::Stack(s) => {
                sink.stacks.insert(s.id, s.frames);
            }
            Event::MemInfo(m) => {
                sink.mem_log.push(m.clone());
                sink.mem_info.insert(m.device, m);
            }
            Event::Note(n) if sink.notes.len() < MAX_NOTES => sink.notes.push(n),
            Event::Note(_) => self.dropped_notes += 1,
            Event::PyRuntime(p) => sink.sym.python_mut().set_runtime(p.version),
            Event::PyCode(c) => sink.sym.python_mut().add_code(c),
            Event::PyStack(s) => sink.sym.python_mut().add_stack(s),
            Event::HeapWalk(h) => {
                let held = sink.heap_walk(&h, self.tracker.state());
                if let (Some(held), Some((c, _))) = (held, self.control.as_mut()) {
                    c.set_holders(&held);
                }
                if h.reason == WalkReason::Exit {
                    // What is freed from the walk's start on, the interpreter's teardown freed.
                    self.tracker.state_mut().teardown_from_ns = Some(h.ts_ns);
                }
            }
            Event::ThreadName(t) if sink.thread_names.len() < MAX_THREAD_NAMES => {
                sink.thread_names.entry(t.tid).or_insert(t.name);
            }
            Event::DeviceInfo(d) => {
                sink.physical.insert(d.ordinal, identity::physical_device(&d));
            }
            Event::Identity(i) => sink.identity = Some(identity::from_vars(&i.vars)),
            Event::Reach(r) => sink.reach(&r, self.tracker.state()),
            Event::Activity(a) => sink.activity(a.ts_ns, a.count),
            Event::Hello(_) => sink.notes.push("the stream held a second Hello event; it was ignored".into()),
            // Thread names past the bound, and the operations on the live set (`decode::op_of`).
            _ => {}
        }
    }

    /// Hands the event to the metrics, started after the Hello and, when the launcher set one,
    /// the Identity event.
    fn publish(&mut self, ts: Option<u64>) {
        let Some(m) = self.metrics.as_mut() else { return };
        let sink = &mut self.sink;
        if !m.started() {
            let stem = sink.stem();
            m.start(sink.hello.pid, sink.identity.as_ref(), &sink.out.dir, &stem, sink.out.err);
        }
        let mut src = metrics_sources!(sink);
        m.after_event(ts, self.tracker.state(), &mut src);
        m.caught_up(!self.dec.get_ref().buffer().is_empty(), self.tracker.state(), &mut src);
    }

    /// Nothing buffered to read: waits for the stream while taking the control endpoint's
    /// samples when due and writing the snapshots its clients ask for.
    fn idle(&mut self) {
        loop {
            let Some((c, fd)) = self.control.as_mut() else { return };
            match c.wait(*fd) {
                Woken::Input => return,
                Woken::Due => c.sample_now(self.tracker.state(), &mut control_sources!(self.sink)),
                Woken::Request => self.snapshots_asked(),
            }
        }
    }

    /// Serves the control endpoint's clients: names the sites for a first frame, and writes a
    /// snapshot of the live set as applied so far for each client that asked for one, handing
    /// each its path.
    fn snapshots_asked(&mut self) {
        let Some((c, _)) = self.control.as_mut() else { return };
        for _ in 0..c.take_asks() {
            self.sink.out.ask_snapshot();
        }
        let Some((c, _)) = self.control.as_mut() else { return };
        let asked = c.take_requests(self.tracker.state(), &mut control_sources!(self.sink));
        if asked.is_empty() {
            return;
        }
        let written = self.sink.top_snapshot(self.tracker.state()).map_err(|e| format!("{e:#}"));
        for r in asked {
            let _ = r.send(written.clone());
        }
    }

    /// Sites forgotten to stay within the bound: their stacks go with them.
    fn forget_evicted(&mut self) {
        if self.tracker.state().has_evicted() {
            for id in self.tracker.state_mut().take_evicted() {
                self.sink.stacks.remove(&id);
                self.sink.sym.forget_stack(id);
            }
        }
    }

    /// Writes an interval report when one is due at time `ts`.
    fn interval_report(&mut self, ts: Option<u64>) {
        let (Some(iv), Some(ts)) = (self.opts.interval, ts) else { return };
        match self.interval_due {
            None => self.interval_due = Some(ts.saturating_add(iv.every_ns)),
            Some(due) if ts >= due => {
                self.sink.interval(self.tracker.state(), ts, iv.keep);
                self.interval_due = Some(ts.saturating_add(iv.every_ns));
            }
            Some(_) => {}
        }
    }

    /// The notes of the final report: the stream's own, then what the collection saw go wrong.
    fn final_notes(&mut self, broken: Option<&String>, lost: u64) -> Vec<String> {
        let sink = &mut self.sink;
        let mut notes = std::mem::take(&mut sink.notes);
        if self.dropped_notes > 0 {
            notes.push(format!("{} more notes of the stream were not kept (at most {MAX_NOTES})", self.dropped_notes));
        }
        if let Some(e) = broken {
            notes.push(format!("event stream broken: {e}; the report holds what was received before"));
        }
        if lost > 0 {
            notes.push(format!("{} never arrived (gaps in the sequence numbers)", words::count(lost, "event")));
        }
        if sink.oom_count > MAX_OOM_REPORTS {
            notes.push(format!(
                "{} allocations failed with out of memory; reports were written for the first \
                 {MAX_OOM_REPORTS}",
                sink.oom_count
            ));
        }
        if self.tracker.duplicates() > 0 {
            notes.push(format!(
                "{} repeated a sequence number, or came after it was given up as lost; they were ignored",
                words::count(self.tracker.duplicates(), "event")
            ));
        }
        if (sink.sym.python_mut().has_runtime() || sink.walks > 0) && sink.exit_holders.is_none() {
            notes.push(
                if self.exit_ts.is_some() {
                    "no heap walk at exit: Python's atexit handlers did not run (os._exit), or GPUSHIM_HEAP_WALK=0"
                } else {
                    "the process was killed: no heap walk for the final report, so who holds its memory is not known"
                }
                .to_string(),
            );
        }
        notes
    }

    /// Why the stream ended (docs/report-schema.md, `reason`), with the stop signal's name, and
    /// a note that says what the program did after a stop signal.
    fn reason(&self, notes: &mut Vec<String>) -> (Reason, Option<String>) {
        if let Some(sig) = self.stop {
            let name = ending::signal_name(sig);
            notes.push(if self.exit_ts.is_some() {
                format!("stopped by {name}: the program ran its exit path after it")
            } else {
                format!("stopped by {name}: the stream ended without an exit event (the signal or a later kill ended the program)")
            });
            return (Reason::Stopped, Some(name));
        }
        if self.exit_ts.is_some() {
            return (Reason::Exit, None);
        }
        if let Some(sig) = self.died_of {
            let name = ending::signal_name(sig);
            notes.push(format!(
                "stopped by {name}: the program ended by it (a terminal's Ctrl-C, or the signal sent to the program), \
                 without an exit event"
            ));
            return (Reason::Stopped, Some(name));
        }
        if self.watch.runs_on() == Some(true) {
            notes.push(
                "the program closed the shim's socket and ran on: events not sent before that are not recorded"
                    .to_string(),
            );
            return (Reason::Disconnected, None);
        }
        (Reason::Killed, None)
    }

    /// Builds and writes the final report, the stream read to its end or its break.
    fn finish(mut self, broken: Option<String>) -> Result<Outcome> {
        let lost = self.tracker.lost();
        let live = self.opts.live;
        let mut notes = self.final_notes(broken.as_ref(), lost);
        let (reason, signal) = self.reason(&mut notes);
        let sink = &mut self.sink;
        let pid = sink.hello.pid;
        sink.driver = sink.sampler.take().map(|s| s.view_now());
        // The state's own latest event time is used if later.
        let ending = Ending {
            work_end_ns: sink.work_end.or(sink.pause_start),
            ..Ending::now(reason, self.exit_ts.unwrap_or(0), lost, notes)
        };
        let mut report = sink.build_report(self.tracker.state(), ending);
        report.signal = signal;
        if let Some(r) = sink.exit_reach.take() {
            let f = reach::classify(&r, self.tracker.state(), &sink.stacks, &mut sink.sym);
            reach::apply(&mut report, f);
        }
        if let Some(e) = &broken {
            let _ = writeln!(
                sink.out.err,
                "gpushim: event stream from pid {pid} broken: {e}; report holds what was received"
            );
        }
        if let Some(dir) = &self.opts.record_dir {
            let p = super::record_path(dir, pid).with_extension("frames.json");
            if let Ok(text) = serde_json::to_string(&sink.sym.cached_frames()) {
                let _ = std::fs::write(p, text);
            }
        }
        let (snapshots, ooms) = (std::mem::take(&mut sink.out.snapshots), std::mem::take(&mut sink.out.ooms));
        // A running program that exited having made no CUDA call worth a report (its collector
        // was started by a snapshot call: a Jupyter kernel with `%load_ext gpushim`,
        // `gpushim.snapshot()` before any allocation) gets no final report, as a program that
        // never started its collector gets none; one line says so. A stream read from a file,
        // one that ended otherwise (killed, disconnected) or that has notes still gets its report.
        if live && reason == Reason::Exit && broken.is_none() && lost == 0 && traced_nothing(&report) {
            let _ = writeln!(sink.out.err, "gpushim: pid {pid} made no CUDA allocation: no final report");
            return Ok(Outcome { report: None, snapshots, ooms, broken });
        }
        let stem = sink.stem();
        let holders = sink.exit_holders.take().map(Box::new);
        let path = sink.out.report(&stem, Kind::Final { pid, holders }, &mut report)?;
        Ok(Outcome { report: Some(path), snapshots, ooms, broken })
    }
}

/// Whether `report` holds nothing that was traced: no allocation, failed or not, no free of an
/// unknown pointer, no site, no virtual memory, and no note (graph memory never launched, a
/// context torn down, a warning of the shim's).
fn traced_nothing(report: &crate::report::Report) -> bool {
    let t = &report.totals;
    report.notes.is_empty()
        && t.alloc_count == 0
        && t.failed_count == 0
        && t.unknown_free_count == 0
        && t.unknown_unmap_count == 0
        && report.sites.is_empty()
        && report.vmm.is_empty()
}
