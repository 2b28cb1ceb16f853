//! Output formats for a [`Report`]: the [`Render`] trait that every format implements and the
//! options of the formats for a person; each format lives in its own file below this module, and
//! [`format`](mod@format) picks one for `gpushim report --format`.
//!
//! A new format is one more file here implementing [`Render`] and one more
//! [`Format`](format::Format) value.

pub mod folded;
pub mod format;
pub mod glossary;
pub mod html;
pub mod json;
pub mod perfetto;
pub mod svg;
pub mod text;
pub mod torch_snapshot;

use std::io::{self, Write};

use crate::report::Report;

/// Writes a report in one format.
pub trait Render {
    /// Writes `report` to `out`.
    ///
    /// # Errors
    /// Only errors of `out` (a broken pipe included; the caller treats it as a clean stop).
    fn render(&self, report: &Report, out: &mut dyn Write) -> io::Result<()>;
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

/// Reports that the format tests share.
#[cfg(test)]
pub(crate) mod tests {
    use super::{Render, TextOptions};
    use crate::report::{Frame, Report, Site};

    /// A report with only the contract's fields (no optional extras), as JSON.
    pub(crate) const CONTRACT_ONLY: &str = r#"{
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

    fn frame(function: &str, module: &str, offset: &str, internal: bool) -> Frame {
        Frame {
            function: function.into(),
            file: None,
            line: None,
            module: module.into(),
            address: format!("0x7f00{}", &offset[2..]),
            offset: Some(offset.into()),
            internal,
            class: if internal { crate::report::Class::Runtime } else { crate::report::Class::User },
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

    /// `r` (the [`sample`]) made a suspect of the sites of one line (1 and 5) with a heap walk's
    /// holders for each: `train.py global 'history'` holds site 1's 3 objects, `train.py global
    /// 'cache'` site 5's 2.
    pub(crate) fn union_with_holders(r: &mut Report) {
        use crate::report::{HolderLine, Holders, SiteHolders};
        r.suspects[0].line_sites = vec![1, 5];
        let member = |site: u32, live: u64, path: &str, objects: u64| SiteHolders {
            site: Some(site),
            live_bytes: live,
            objects,
            object_bytes: live,
            in_use_bytes: live,
            in_use_from: "objects".into(),
            holders: vec![HolderLine {
                how: "path".into(),
                path: vec![path.into()],
                objects,
                bytes: live,
                text: format!("{path} \u{2192} {objects} objects"),
                ..HolderLine::default()
            }],
            ..SiteHolders::default()
        };
        r.holders = Some(Holders {
            schema: crate::report::HOLDERS_SCHEMA.into(),
            pid: 1234,
            reason: "exit".into(),
            number: None,
            walk: Default::default(),
            sites: vec![
                member(1, 3 << 20, "train.py global 'history'", 3),
                member(5, 1 << 20, "train.py global 'cache'", 2),
            ],
            unattributed: SiteHolders::default(),
            kinds: vec![],
        });
    }

    /// What `format` writes for `r`, as bytes.
    pub(crate) fn render_bytes(format: &dyn Render, r: &Report) -> Vec<u8> {
        let mut out = Vec::new();
        format.render(r, &mut out).unwrap();
        out
    }

    /// What `format` writes for `r`, as text.
    pub(crate) fn render(format: &dyn Render, r: &Report) -> String {
        let mut out = Vec::new();
        format.render(r, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    /// The default text options, with `all_frames` as given.
    pub(crate) fn opts(all_frames: bool) -> TextOptions {
        TextOptions { all_frames, ..TextOptions::default() }
    }
}
