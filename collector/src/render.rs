//! Output formats for a [`Report`], behind one trait, and the collector's stderr summary.
//!
//! A new format is one more type implementing [`Render`] and one more [`Format`] value; the
//! folded, SVG and Perfetto formats live in submodules.

mod folded;
mod perfetto;
mod svg;

use std::io::{self, Write};

use crate::report::{Frame, Report};
use crate::words::{count, first_user_frame, fmt_bytes, fmt_seconds, frame_label, shell_words, site_name};

pub use folded::Folded;
pub use perfetto::Perfetto;
pub use svg::Svg;

/// Writes a report in one format.
pub trait Render {
    /// Writes `report` to `out`.
    ///
    /// # Errors
    /// Only errors of `out` (a broken pipe included; the caller treats it as a clean stop).
    fn render(&self, report: &Report, out: &mut dyn Write) -> io::Result<()>;
}

/// The formats `gpushim report` offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// For a person: totals, suspects, top sites with their stacks.
    Text,
    /// The report itself, pretty-printed.
    Json,
    /// Collapsed stacks weighted by live bytes, outermost frame first, for flame-graph tools.
    Folded,
    /// A flame graph of live bytes (SVG, drawn with inferno).
    Svg,
    /// Chrome trace-event JSON with counter tracks of live bytes over time, for
    /// ui.perfetto.dev.
    Perfetto,
}

/// Options of the text format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TextOptions {
    /// Sites to show, most live bytes first.
    pub top: usize,
    /// Frames to show per stack.
    pub depth: usize,
    /// Show CUDA/framework-internal frames too.
    pub all_frames: bool,
}

impl Default for TextOptions {
    fn default() -> Self {
        TextOptions { top: 10, depth: 12, all_frames: false }
    }
}

/// The renderer for `format`.
pub fn renderer(format: Format, opts: TextOptions) -> Box<dyn Render> {
    match format {
        Format::Text => Box::new(Text(opts)),
        Format::Json => Box::new(Json),
        Format::Folded => Box::new(Folded(opts)),
        Format::Svg => Box::new(Svg(opts)),
        Format::Perfetto => Box::new(Perfetto),
    }
}

/// The report as pretty-printed JSON (the same document the collector writes).
pub struct Json;

impl Render for Json {
    fn render(&self, report: &Report, out: &mut dyn Write) -> io::Result<()> {
        crate::json::to_writer(out, report)?;
        writeln!(out)
    }
}

/// The report for a person.
pub struct Text(pub TextOptions);

impl Render for Text {
    fn render(&self, r: &Report, out: &mut dyn Write) -> io::Result<()> {
        let opts = self.0;
        let what = match r.snapshot {
            Some(n) => format!("snapshot {n}"),
            None => r.reason.name().to_string(),
        };
        writeln!(
            out,
            "pid {} ({what}): {}; {}, shim {}",
            r.pid,
            shell_words(&r.command),
            fmt_seconds(r.duration_s),
            if r.shim_version.is_empty() { "?" } else { &r.shim_version },
        )?;
        let t = &r.totals;
        writeln!(
            out,
            "live: {} in {}; peak {}; {}, {}, {} failed",
            fmt_bytes(t.live_bytes),
            count(t.live_count, "allocation"),
            fmt_bytes(t.peak_live_bytes),
            count(t.alloc_count, "allocation"),
            count(t.free_count, "free"),
            t.failed_count,
        )?;
        for (name, k) in r.kinds.iter() {
            writeln!(
                out,
                "  {name:<12} {:>10} in {:>6} (peak {})",
                fmt_bytes(k.live_bytes),
                k.live_count,
                fmt_bytes(k.peak_live_bytes)
            )?;
        }
        for d in &r.devices {
            writeln!(
                out,
                "  {:<12} {:>10} in {:>6} (peak {})",
                format!("GPU {}", d.ordinal),
                fmt_bytes(d.live_bytes),
                d.live_count,
                fmt_bytes(d.peak_live_bytes)
            )?;
        }
        let odd = anomalies(r);
        if !odd.is_empty() {
            writeln!(out, "anomalies: {}", odd.join(", "))?;
        }
        if let Some(o) = &r.oom {
            writeln!(out)?;
            let dev = if o.device >= 0 { format!(" on GPU {}", o.device) } else { String::new() };
            writeln!(
                out,
                "out of memory: {} of {} ({}){dev} returned {} at {}",
                o.api,
                fmt_bytes(o.size),
                o.kind,
                o.result,
                fmt_seconds(o.ts_s)
            )?;
            if let (Some(free), Some(total)) = (o.device_free_bytes, o.device_total_bytes) {
                writeln!(out, "  the driver reported {} free of {}", fmt_bytes(free), fmt_bytes(total))?;
            }
            write_frames(out, &o.frames, opts, "      ")?;
        }

        writeln!(out)?;
        if r.suspects.is_empty() {
            writeln!(out, "no leak suspects")?;
        } else {
            writeln!(out, "leak suspects:")?;
            for (i, s) in r.suspects.iter().enumerate() {
                writeln!(out, "  #{} site {} (score {:.2}): {}", i + 1, s.site, s.score, s.reason)?;
                if let Some(f) = r.site(s.site).and_then(first_user_frame) {
                    writeln!(out, "      at {}", frame_label(f))?;
                }
            }
        }

        if !r.sites.is_empty() {
            let n = opts.top.min(r.sites.len());
            writeln!(out)?;
            writeln!(out, "top sites by live bytes ({n} of {}):", r.sites.len())?;
            for s in r.sites.iter().take(n) {
                writeln!(
                    out,
                    "  site {}: {} live in {} ({}, {}); {} ({}), {}, peak {}",
                    site_name(s),
                    fmt_bytes(s.live_bytes),
                    s.live_count,
                    s.kind,
                    s.apis.join(", "),
                    count(s.alloc_count, "allocation"),
                    fmt_bytes(s.alloc_bytes),
                    count(s.free_count, "free"),
                    fmt_bytes(s.peak_live_bytes),
                )?;
                write_frames(out, &s.frames, opts, "      ")?;
            }
        }

        if !r.failures.is_empty() {
            writeln!(out)?;
            writeln!(out, "failed allocations ({}):", t.failed_count)?;
            for f in r.failures.iter().take(opts.top) {
                let dev = if f.device >= 0 { format!(" on GPU {}", f.device) } else { String::new() };
                writeln!(
                    out,
                    "  {} of {} ({}){dev} returned {} at {}",
                    f.api,
                    fmt_bytes(f.size),
                    f.kind,
                    f.result,
                    fmt_seconds(f.ts_s)
                )?;
                write_frames(out, &f.frames, opts, "      ")?;
            }
            if r.failures.len() > opts.top {
                writeln!(out, "  … {} more in the report", r.failures.len() - opts.top)?;
            }
        }
        for m in &r.mem_info {
            writeln!(
                out,
                "GPU {}: driver reported {} free of {} at {}",
                m.device,
                fmt_bytes(m.free_bytes),
                fmt_bytes(m.total_bytes),
                fmt_seconds(m.ts_s)
            )?;
        }
        if !r.notes.is_empty() {
            writeln!(out)?;
            writeln!(out, "notes:")?;
            for n in &r.notes {
                writeln!(out, "  {n}")?;
            }
        }
        Ok(())
    }
}

/// Writes up to `opts.depth` frames, one per line, internal ones only with `all_frames`.
fn write_frames(out: &mut dyn Write, frames: &[Frame], opts: TextOptions, indent: &str) -> io::Result<()> {
    let shown: Vec<&Frame> = frames.iter().filter(|f| opts.all_frames || !f.internal).collect();
    for f in shown.iter().take(opts.depth) {
        writeln!(out, "{indent}{}", frame_label(f))?;
    }
    if shown.len() > opts.depth {
        writeln!(out, "{indent}… {} more frames", shown.len() - opts.depth)?;
    }
    if frames.is_empty() {
        writeln!(out, "{indent}(no backtrace)")?;
    }
    Ok(())
}

/// The counters that mean something was off, in words; empty if none.
fn anomalies(r: &Report) -> Vec<String> {
    let t = &r.totals;
    [
        (t.unknown_free_count, "frees of unknown addresses"),
        (t.failed_free_count, "failed frees"),
        (t.replaced_count, "addresses returned again while live (missed frees)"),
        (t.lost_events, "events lost"),
    ]
    .iter()
    .filter(|(n, _)| *n > 0)
    .map(|(n, what)| format!("{n} {what}"))
    .collect()
}

/// The collector's closing lines on stderr (each starting `gpushim: `): totals, up to three
/// suspects or "no leak suspects", and where the report went.
pub fn summary(r: &Report, path: &std::path::Path, out: &mut dyn Write) -> io::Result<()> {
    let t = &r.totals;
    let mut parts = Vec::new();
    for (name, k) in r.kinds.iter() {
        if k.live_count == 0 {
            continue;
        }
        let mut p = format!("{name} {}", fmt_bytes(k.live_bytes));
        if name == "device" {
            let gpus: Vec<String> =
                r.devices.iter().filter(|d| d.live_count > 0).map(|d| d.ordinal.to_string()).collect();
            match gpus.len() {
                0 => {}
                1 => p += &format!(" on GPU {}", gpus[0]),
                _ => p += &format!(" on GPUs {}", gpus.join(", ")),
            }
        }
        parts.push(p);
    }
    let kinds = if parts.is_empty() { String::new() } else { format!(" ({})", parts.join("; ")) };
    writeln!(
        out,
        "gpushim: pid {} ({}): {} allocation{} live, {}{kinds}; peak {}",
        r.pid,
        r.reason.name(),
        t.live_count,
        if t.live_count == 1 { "" } else { "s" },
        fmt_bytes(t.live_bytes),
        fmt_bytes(t.peak_live_bytes),
    )?;
    if r.suspects.is_empty() {
        writeln!(out, "gpushim: no leak suspects")?;
    }
    for (i, s) in r.suspects.iter().take(3).enumerate() {
        let at =
            r.site(s.site).and_then(first_user_frame).map(|f| format!(" at {}", frame_label(f))).unwrap_or_default();
        writeln!(out, "gpushim: suspect #{} site {}: {}{at}", i + 1, s.site, s.reason)?;
    }
    if r.suspects.len() > 3 {
        writeln!(out, "gpushim: {} more suspects in the report", r.suspects.len() - 3)?;
    }
    writeln!(out, "gpushim: report written to {}", path.display())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::report::Site;

    /// A report with only the contract's fields (no optional extras), as JSON.
    const CONTRACT_ONLY: &str = r#"{
      "schema": "gpushim.report.v1", "pid": 1234, "command": ["./target"], "reason": "exit",
      "duration_s": 0.3, "shim_version": "0.1.0",
      "totals": {"live_bytes": 10485760, "live_count": 10, "peak_live_bytes": 10485760, "alloc_count": 10,
                 "free_count": 0, "failed_count": 0, "unknown_free_count": 2, "failed_free_count": 0,
                 "replaced_count": 0},
      "kinds": {"device": {"live_bytes": 10485760, "live_count": 10, "peak_live_bytes": 10485760},
                "managed": {"live_bytes": 0, "live_count": 0, "peak_live_bytes": 0},
                "pinned_host": {"live_bytes": 0, "live_count": 0, "peak_live_bytes": 0}},
      "devices": [{"ordinal": 0, "live_bytes": 10485760, "live_count": 10, "peak_live_bytes": 10485760}],
      "sites": [{"id": 3, "kind": "device", "apis": ["cudaMalloc"], "live_bytes": 10485760, "live_count": 10,
                 "alloc_count": 10, "alloc_bytes": 10485760, "free_count": 0, "peak_live_bytes": 10485760,
                 "frames": [
                   {"function": "cudaMalloc", "file": null, "line": null, "module": "/usr/lib/libcudart.so.13",
                    "address": "0x7f0000001234", "internal": true},
                   {"function": "render_frame", "file": "/src/app/target.c", "line": 42, "module": "/src/app/target",
                    "address": "0x401234", "internal": false}]}],
      "suspects": [{"site": 3, "score": 1.0, "reason": "10 allocations live (10.0 MiB), none freed"}],
      "failures": [],
      "notes": []
    }"#;

    #[test]
    fn text_hides_internal_frames_unless_asked() {
        let r = Report::from_slice(CONTRACT_ONLY.as_bytes()).unwrap();
        let text = |opts| {
            let mut out = Vec::new();
            renderer(Format::Text, opts).render(&r, &mut out).unwrap();
            String::from_utf8(out).unwrap()
        };
        let t = text(TextOptions::default());
        assert!(t.starts_with("pid 1234 (exit): ./target; 300 ms, shim 0.1.0\n"), "{t}");
        assert!(t.contains("anomalies: 2 frees of unknown addresses\n"), "{t}");
        assert!(t.contains("  #1 site 3 (score 1.00): 10 allocations live (10.0 MiB), none freed\n      at render_frame (app/target.c:42)\n"), "{t}");
        assert!(!t.contains("cudaMalloc (libcudart"), "{t}");
        let all = text(TextOptions { all_frames: true, ..TextOptions::default() });
        assert!(
            all.contains("      cudaMalloc (libcudart.so.13+0x7f0000001234)\n      render_frame (app/target.c:42)\n"),
            "{all}"
        );

        let mut json = Vec::new();
        renderer(Format::Json, TextOptions::default()).render(&r, &mut json).unwrap();
        assert_eq!(Report::from_slice(&json).unwrap(), r);

        let mut err = Vec::new();
        summary(&r, std::path::Path::new("/o/gpushim-1234.json"), &mut err).unwrap();
        assert_eq!(
            String::from_utf8(err).unwrap(),
            "gpushim: pid 1234 (exit): 10 allocations live, 10.0 MiB (device 10.0 MiB on GPU 0); peak 10.0 MiB\n\
             gpushim: suspect #1 site 3: 10 allocations live (10.0 MiB), none freed at render_frame (app/target.c:42)\n\
             gpushim: report written to /o/gpushim-1234.json\n"
        );
    }

    fn frame(function: &str, module: &str, offset: &str, internal: bool) -> Frame {
        Frame {
            function: function.into(),
            file: None,
            line: None,
            module: module.into(),
            address: format!("0x7f00{}", &offset[2..]),
            offset: Some(offset.into()),
            internal,
            ..Frame::default()
        }
    }

    fn site(id: u32, live_bytes: u64, frames: Vec<Frame>) -> Site {
        Site {
            id,
            kind: "device".into(),
            apis: vec!["cudaMalloc".into()],
            live_bytes,
            live_count: 1,
            alloc_count: 1,
            alloc_bytes: live_bytes,
            peak_live_bytes: live_bytes,
            frames,
            ..Site::default()
        }
    }

    /// A small report: `render_frame` holds 3 MiB (plus 1 MiB from a second stack id with the
    /// same user frames), `load;weird` 1 KiB through an unsymbolized frame, 10 bytes have no
    /// backtrace, a freed site holds nothing; a timeline over two GPUs; one suspect; one
    /// out-of-memory failure.
    pub(crate) fn sample() -> Report {
        use crate::report::{FailureRecord, Suspect, Timeline, TimelinePoint};
        let cuda = frame("cudaMalloc", "/usr/lib/libcudart.so.13", "0x500", true);
        let main = frame("main", "/w/app", "0x100", false);
        let render = frame("render_frame", "/w/app", "0x200", false);
        let mut r = Report::from_slice(CONTRACT_ONLY.as_bytes()).unwrap();
        r.sites = vec![
            site(1, 3 << 20, vec![cuda.clone(), render.clone(), main.clone()]),
            site(
                2,
                1024,
                vec![
                    frame("??", "/opt/lib/libfoo.so", "0x1234", false),
                    frame("load;weird", "/w/app", "0x300", false),
                    main.clone(),
                ],
            ),
            site(gpushim_wire::NO_STACK, 10, vec![]),
            site(4, 0, vec![frame("freed_all", "/w/app", "0x400", false), main.clone()]),
            site(5, 1 << 20, vec![cuda, render, main]),
        ];
        r.sites[0].series = vec![(0.0, 1 << 20), (0.5, 2 << 20), (1.0, 3 << 20)];
        r.suspects = vec![Suspect {
            site: 1,
            score: 1.0,
            reason: "+1.0 MiB per 500 ms over 1 s, 3 live (3.0 MiB), none freed".into(),
            live_bytes: 3 << 20,
            live_count: 3,
            ..Suspect::default()
        }];
        r.failures = vec![FailureRecord {
            api: "cudaMalloc".into(),
            kind: "device".into(),
            size: 1 << 40,
            result: 2,
            site: 1,
            device: 1,
            ts_s: 1.25,
            frames: vec![],
        }];
        r.timeline = Timeline {
            devices: vec![0, 1],
            points: vec![
                TimelinePoint { t_s: 0.0, kinds: [1 << 20, 0, 0], devices: vec![1 << 20, 0] },
                TimelinePoint { t_s: 0.5, kinds: [2 << 20, 0, 4096], devices: vec![1 << 20, 1 << 20] },
                TimelinePoint { t_s: 1.000_002, kinds: [3 << 20, 0, 0], devices: vec![2 << 20, 1 << 20] },
            ],
        };
        r
    }

    fn render(format: Format, r: &Report, all_frames: bool) -> String {
        let mut out = Vec::new();
        let opts = TextOptions { all_frames, ..TextOptions::default() };
        renderer(format, opts).render(r, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn folded_lines_are_outermost_first_and_weighted_by_live_bytes() {
        let r = sample();
        assert_eq!(
            render(Format::Folded, &r, false),
            "[no backtrace] 10\n\
             main;load:weird;libfoo.so+0x1234 1024\n\
             main;render_frame 4194304\n"
        );
        assert_eq!(
            render(Format::Folded, &r, true),
            "[no backtrace] 10\n\
             main;load:weird;libfoo.so+0x1234 1024\n\
             main;render_frame;cudaMalloc 4194304\n"
        );
    }

    #[test]
    fn svg_is_a_flame_graph_of_the_folded_stacks() {
        let svg = render(Format::Svg, &sample(), false);
        assert!(svg.contains("<svg"), "{svg}");
        for name in ["render_frame", "main", "load:weird", "libfoo.so+0x1234"] {
            assert!(svg.contains(name), "{name} missing");
        }
        assert!(svg.contains("gpushim: live bytes of pid 1234 (exit)"));
        assert!(!svg.contains("cudaMalloc"), "internal frames are hidden");
        // Same input, same bytes (colours come from the names).
        assert_eq!(svg, render(Format::Svg, &sample(), false));
        let mut empty = sample();
        empty.sites.clear();
        let svg = render(Format::Svg, &empty, false);
        assert!(svg.contains("<svg") && svg.contains("no live allocations"), "{svg}");
    }

    #[test]
    fn perfetto_has_counter_tracks_of_the_timeline() {
        let text = render(Format::Perfetto, &sample(), false);
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let events = v["traceEvents"].as_array().unwrap();
        for e in events {
            assert!(e["ph"].is_string() && e["name"].is_string(), "{e}");
            assert!(e["ts"].is_number() && e["pid"] == 1234, "{e}");
        }
        let track = |name: &str| -> Vec<&serde_json::Value> {
            events.iter().filter(|e| e["ph"] == "C" && e["name"] == name).collect()
        };
        let kinds = track("live bytes");
        assert_eq!(kinds.len(), 3);
        assert_eq!(kinds[1]["ts"], 500_000.0);
        assert_eq!(kinds[2]["ts"], 1_000_002.0);
        assert_eq!(kinds[1]["args"]["device"], 2 << 20);
        assert_eq!(kinds[1]["args"]["pinned_host"], 4096);
        assert_eq!(kinds[2]["args"]["managed"], 0);
        let gpus = track("live bytes on GPU");
        assert_eq!(gpus.len(), 3);
        assert_eq!(gpus[2]["args"]["0"], 2 << 20);
        assert_eq!(gpus[2]["args"]["1"], 1 << 20);
        let suspect = track("suspect #1 site 1 render_frame");
        assert_eq!(suspect.len(), 3);
        assert_eq!(suspect[2]["args"]["live bytes"], 3 << 20);
        let failed: Vec<_> = events.iter().filter(|e| e["ph"] == "i").collect();
        assert_eq!(failed.len(), 1);
        assert_eq!(failed[0]["name"], "cudaMalloc of 1024.0 GiB failed (2)");
        assert_eq!(failed[0]["ts"], 1_250_000.0);
        assert!(events.iter().any(|e| e["ph"] == "M" && e["name"] == "process_name"));
    }

    #[test]
    fn text_shows_an_out_of_memory_report_on_top() {
        let mut r = sample();
        r.reason = crate::report::Reason::Oom;
        r.oom = Some(crate::report::Oom {
            size: 3 << 30,
            api: "cudaMalloc".into(),
            kind: "device".into(),
            device: 0,
            result: 2,
            site: 1,
            ts_s: 1.5,
            device_free_bytes: Some(1 << 30),
            device_total_bytes: Some(80 << 30),
            frames: r.sites[0].frames.clone(),
        });
        let t = render(Format::Text, &r, false);
        assert!(
            t.contains(
                "out of memory: cudaMalloc of 3.0 GiB (device) on GPU 0 returned 2 at 1.5 s\n  \
                 the driver reported 1.0 GiB free of 80.0 GiB\n      render_frame (app+0x200)\n"
            ),
            "{t}"
        );
        assert!(t.starts_with("pid 1234 (oom): "), "{t}");
    }
}
