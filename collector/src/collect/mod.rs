//! The collection of one event stream: reads it to its end, keeps the live set, writes
//! snapshots when their boundary is reached, an out-of-memory report when an allocation fails
//! with out of memory, interval reports when asked for, and the final report at the end.
//!
//! Its rooms: `decode` (the stream's start, each event's time and its place as an operation on
//! the live set), `drive` (the loop over the events and the final report), `sink` (what the
//! stream said besides allocations, and the reports made part-way), `write` (one writer for the
//! four kinds of report and the files beside them).
//!
//! A stream that breaks part-way (truncated, garbage) still gets a report of everything valid
//! received before the break; the caller exits 1 then.

mod decode;
mod drive;
pub mod ending;
mod sink;
mod write;

use std::io::{Read, Write};
use std::path::PathBuf;

use anyhow::Result;

use drive::Drive;
use write::Writer;

/// Options of `gpushim collect`.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Write reports here instead of the directory the stream's Hello names.
    pub output_dir: Option<PathBuf>,
    /// Also write each report as an HTML page beside its JSON (`X.json` → `X.html`; set by
    /// `GPUSHIM_HTML=1`).
    pub html: bool,
    /// Sample the driver's view of the target's device memory (NVML, [`crate::explain::nvml`]) while
    /// the stream is read: only when the target is running, not for a recorded stream.
    pub sample_driver: bool,
    /// Rolling reports of a long run (`GPUSHIM_REPORT_INTERVAL`), if asked for.
    pub interval: Option<Intervals>,
    /// Serve Prometheus metrics while the stream is read (`GPUSHIM_METRICS`, [`crate::metrics`]).
    pub metrics: Option<crate::metrics::Config>,
    /// Listen for `gpushim top` while the stream is read ([`crate::control`]): the descriptor
    /// the stream is read from (the shim's socket), polled while the loop waits. `None` for a
    /// recorded stream.
    pub control: Option<i32>,
    /// The reorder buffer's bound, bytes (`GPUSHIM_REORDER_MIB`; `None`:
    /// [`crate::account::reorder::DEFAULT_REORDER_BYTES`]).
    pub reorder_bytes: Option<usize>,
    /// The most sites (distinct stacks) kept (`GPUSHIM_MAX_STACKS`; `None`:
    /// [`crate::account::live::DEFAULT_MAX_STACKS`]); see [`State::set_max_stacks`](crate::account::live::State::set_max_stacks).
    pub max_stacks: Option<usize>,
    /// The stream comes from a running program (`gpushim collect` on the shim's socket): the
    /// final report's reason takes a stop signal the collector received ([`ending::STOP`]) and
    /// whether the program still runs after a stream without an exit event.
    pub live: bool,
    /// The directory of a recorded stream (`GPUSHIM_RECORD`), into which every return address
    /// symbolized with its frames is written at the end (`stream-<pid>.frames.json`, beside
    /// the stream `stream-<pid>.gpushim`, the program's pid), so that the stream read again
    /// elsewhere, without the program's libraries, names the same frames.
    pub record_dir: Option<PathBuf>,
    /// Such a file to start from (`gpushim collect --input X` reads `X`'s `.frames.json`).
    pub frames_in: Option<PathBuf>,
}

/// At most this many thread names are kept (a long-running service may start threads without
/// end); the threads of later `ThreadName` events are reported by id only.
pub const MAX_THREAD_NAMES: usize = 10_000;

/// At most this many notes of the stream are kept; later ones are counted in one more note.
pub const MAX_NOTES: usize = 1000;

/// Rolling reports: `gpushim-<pid>-interval-<n>.json` (the stem of `crate::explain::identity`), the
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

/// What a collection produced. `gpushim collect` needs only the final report and whether the
/// stream broke; the files written part-way are listed for the tests.
#[derive(Debug)]
#[cfg_attr(not(test), allow(dead_code))]
pub struct Outcome {
    /// The final report's path; `None` for an empty stream, or one in which no CUDA allocation
    /// was made (nothing to report).
    pub report: Option<PathBuf>,
    /// Snapshot files written, in order.
    pub snapshots: Vec<PathBuf>,
    /// Out-of-memory reports written, in order.
    pub ooms: Vec<PathBuf>,
    /// Why the stream broke, if it did (the report holds what came before).
    pub broken: Option<String>,
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

#[cfg(test)]
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
    let Some((dec, hello)) = decode::open(input)? else {
        return Ok(Outcome { report: None, snapshots: Vec::new(), ooms: Vec::new(), broken: None });
    };
    let out_dir = match &opts.output_dir {
        Some(d) => d.clone(),
        None => decode::output_dir_of(&hello),
    };
    // A GPUSHIM_OUTPUT that does not exist yet is made, as `gpushim run -o DIR` makes its
    // directory; one that cannot be made is said when a report falls back to $TMPDIR.
    if !hello.output_dir.is_empty() && !out_dir.exists() {
        let _ = std::fs::create_dir_all(&out_dir);
    }
    let out = Writer::new(out_dir, opts.html, err, answers);
    Drive::new(dec, hello, opts, out).run(stream_read)
}

/// The recorded stream of process `pid` in `dir`; its frames file is the same name with the
/// extension `frames.json` (which `gpushim collect --input` looks for).
pub fn record_path(dir: &std::path::Path, pid: u32) -> PathBuf {
    dir.join(format!("stream-{pid}.gpushim"))
}

#[cfg(test)]
mod tests {
    use super::decode::output_dir_of;
    use super::*;
    use crate::explain::oom::MAX_OOM_REPORTS;
    use crate::report::output::tests::TempDir;
    use crate::report::Reason;
    use crate::report::Report;
    use gpushim_testkit::{alloc, failed, free, stream_of, MS};
    use gpushim_wire::{encode, write_header, Exit, Snapshot, Stack, NO_STACK};
    use gpushim_wire::{Event, MemInfo};
    use std::path::Path;

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
        let here = crate::explain::symbolize::tests::module_holding(events as *const () as usize as u64);
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
            Event::ApiSnapshot(ApiSnapshot {
                boundary: 2,
                ts_ns: 2 * MS,
                label: "../after one".into(),
                dir: String::new(),
            }),
            alloc(1, 2 * MS, 0x7100_0000, 2 << 20, NO_STACK),
            Event::ApiSnapshot(ApiSnapshot { boundary: 2, ts_ns: 3 * MS, label: String::new(), dir: String::new() }),
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
        assert_eq!(r.totals.gauge.live_bytes, 3 << 20);
        assert_eq!(Report::read(&second).unwrap().label, None);
        let err = String::from_utf8(err).unwrap();
        assert!(!err.contains("snapshot 1 written") && !err.contains("snapshot 2 written"), "{err}");
        assert!(err.contains("snapshot 3 written"), "{err}");
    }

    /// An API snapshot that names a directory is written there, with its heap walk's and its
    /// reachability scan's files beside it; the other reports stay in the output directory,
    /// and a relative directory (which the shim never sends) is not followed.
    #[test]
    fn an_api_snapshot_goes_to_the_directory_it_names() {
        use gpushim_wire::{ApiSnapshot, HeapWalk, WalkReason, WalkStatus};
        let d = TempDir::new("collect-api-dir");
        let cells = d.0.join("cells");
        std::fs::create_dir(&cells).unwrap();
        let walk = |n: u32| {
            Event::HeapWalk(HeapWalk {
                reason: WalkReason::Snapshot,
                number: n,
                status: WalkStatus::Complete,
                ts_ns: 3 * MS,
                elapsed_ns: MS,
                visited: 0,
                result: String::new(),
            })
        };
        let ev = vec![
            hello(&d.0),
            alloc(0, MS, 0x7000_0000, 1 << 20, NO_STACK),
            Event::ApiSnapshot(ApiSnapshot {
                boundary: 1,
                ts_ns: 2 * MS,
                label: "cell1".into(),
                dir: cells.to_str().unwrap().into(),
            }),
            walk(1),
            Event::ApiSnapshot(ApiSnapshot { boundary: 1, ts_ns: 2 * MS, label: "mine".into(), dir: "rel".into() }),
            Event::Exit(Exit { ts_ns: 5 * MS }),
        ];
        let (mut err, mut answers) = (Vec::new(), Vec::new());
        let out = collect_answering(&stream_of(&ev)[..], &Options::default(), &mut err, &mut answers).unwrap();
        let first = cells.join("gpushim-4242-snapshot-1-cell1.json");
        // Numbered within its directory; answered under its number in the stream.
        let second = d.0.join("gpushim-4242-snapshot-1-mine.json");
        assert_eq!(out.snapshots, vec![first.clone(), second.clone()]);
        let want = format!("snapshot 1 {}\nsnapshot 2 {}\n", first.display(), second.display());
        assert_eq!(String::from_utf8(answers).unwrap(), want);
        assert!(cells.join("gpushim-4242-snapshot-1-cell1.holders.json").is_file());
        assert_eq!(out.report, Some(d.0.join("gpushim-4242.json")));
        assert!(!d.0.join("rel").exists());
    }

    /// A running process whose collector a snapshot call started (a Jupyter kernel's `%load_ext
    /// gpushim`) and that exited having made no CUDA allocation: its snapshot is written, its
    /// final report is not, and one line says why. The same stream read from a file still gets
    /// its report.
    #[test]
    fn a_process_that_made_no_allocation_gets_no_final_report() {
        use gpushim_wire::ApiSnapshot;
        let d = TempDir::new("collect-nothing");
        let ev = vec![
            hello(&d.0),
            Event::ApiSnapshot(ApiSnapshot { boundary: 0, ts_ns: MS, label: "load".into(), dir: String::new() }),
            Event::Exit(Exit { ts_ns: 5 * MS }),
        ];
        let (mut err, mut answers) = (Vec::new(), Vec::new());
        let live = Options { live: true, ..Options::default() };
        let out = collect_answering(&stream_of(&ev)[..], &live, &mut err, &mut answers).unwrap();
        assert_eq!(out.snapshots, vec![d.0.join("gpushim-4242-snapshot-1-load.json")]);
        assert_eq!(out.report, None);
        assert!(!d.0.join("gpushim-4242.json").exists());
        let err = String::from_utf8(err).unwrap();
        assert_eq!(err, "gpushim: pid 4242 made no CUDA allocation: no final report\n");
        let out = collect(&stream_of(&ev)[..], &Options::default(), &mut Vec::new()).unwrap();
        assert_eq!(out.report, Some(d.0.join("gpushim-4242.json")));
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
        assert_eq!(r.totals.gauge.live_count, 31);
        assert_eq!(r.totals.gauge.live_bytes, 30 * (1 << 20) + 10);
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
        assert_eq!((s.totals.gauge.live_count, s.totals.gauge.live_bytes), (10, 10 << 20));
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
        assert!(lines[3].contains(" at gpushim_collector::collect::tests::events (collect/mod.rs:"), "{}", lines[3]);
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
        assert_eq!(r.totals.gauge.live_count, 30);
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
        let here = crate::explain::symbolize::tests::module_holding(events as *const () as usize as u64);
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
        assert_eq!(r.totals.gauge.live_count, 7);
        assert_eq!(r.totals.gauge.live_bytes, (5 + 1 + 2) << 20);
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
        assert_eq!(r2.totals.gauge.live_count, 8);
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
        assert_eq!((r.totals.gauge.live_count, r.totals.gauge.live_bytes), (31, 30 * (1 << 20) + 10));
        let r5 = Report::read(&d.0.join("gpushim-4242-interval-5.json")).unwrap();
        assert_eq!(r5.interval, Some(5));
        assert!(r5.totals.alloc_count < r.totals.alloc_count);
        // The final report is unchanged by them.
        assert_eq!(Report::read(&out.report.unwrap()).unwrap().totals.gauge.live_count, 31);
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
        let here = crate::explain::symbolize::tests::module_holding(events as *const () as usize as u64);
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
        assert_eq!((r.totals.alloc_count, r.totals.free_count, r.totals.gauge.live_count), (300, 299, 1));
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
