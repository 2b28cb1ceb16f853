//! Chrome trace-event JSON (`{"traceEvents": [...]}`), which ui.perfetto.dev and
//! chrome://tracing open: counter tracks of live bytes over time, per kind (`live bytes
//! device`, …), per device (`live bytes on GPU 0`, …) and for each of the top suspects, a track
//! per thread that allocated at the top suspects' sites (a slice per site, from the thread's
//! first to its latest allocation there), plus an instant event per failed allocation.
//!
//! Times (`ts`) are microseconds after the report's first event. A counter event's `args`
//! hold one value per series; Perfetto names each track `name` + space + series.

use std::io::{self, Write};

use serde_json::{json, Value};

use super::Render;
use crate::report::words::{first_user_frame, fmt_bytes, frame_label, shell_words};
use crate::report::Report;

/// At most this many suspects get a track of their own.
pub const MAX_SUSPECT_TRACKS: usize = 10;

/// The Perfetto (Chrome trace-event JSON) format.
pub struct Perfetto;

fn us(t_s: f64) -> f64 {
    // Whole nanoseconds, in microseconds.
    (t_s * 1e9).round() / 1e3
}

/// The trace's events, in time order within each track.
pub fn events(r: &Report) -> Vec<Value> {
    let pid = r.pid;
    let mut ev = vec![
        json!({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "ts": 0,
               "args": {"name": format!("pid {pid}: {}", shell_words(&r.command))}}),
        json!({"name": "thread_name", "ph": "M", "pid": pid, "tid": 0, "ts": 0,
               "args": {"name": "gpushim"}}),
    ];
    let tl = &r.timeline;
    for p in &tl.points {
        ev.push(json!({"name": "live bytes", "ph": "C", "pid": pid, "tid": 0, "ts": us(p.t_s),
                       "args": {"device": p.kinds[0], "managed": p.kinds[1],
                                "pinned_host": p.kinds[2]}}));
    }
    if !tl.devices.is_empty() {
        for p in &tl.points {
            let args: serde_json::Map<String, Value> =
                tl.devices.iter().zip(&p.devices).map(|(d, &b)| (d.to_string(), json!(b))).collect();
            ev.push(json!({"name": "live bytes on GPU", "ph": "C", "pid": pid, "tid": 0,
                           "ts": us(p.t_s), "args": args}));
        }
    }
    for (i, s) in r.suspects.iter().take(MAX_SUSPECT_TRACKS).enumerate() {
        let Some(site) = r.site(s.site) else { continue };
        let at = first_user_frame(site)
            .map_or_else(String::new, |f| format!(" {}", f.function.split('(').next().unwrap_or(&f.function)));
        let name = format!("suspect #{} site {}{at}", i + 1, crate::report::words::site_id_name(s.site));
        for &(t, v) in &site.series {
            ev.push(json!({"name": name, "ph": "C", "pid": pid, "tid": 0, "ts": us(t),
                           "args": {"live bytes": v}}));
        }
    }
    thread_tracks(r, &mut ev);
    for f in &r.failures {
        let at = f.frames.iter().find(|f| !f.internal).map(frame_label).unwrap_or_default();
        ev.push(json!({"name": format!("{} of {} failed ({})", f.api, fmt_bytes(f.size), f.result),
                       "ph": "i", "s": "p", "pid": pid, "tid": 0, "ts": us(f.ts_s),
                       "args": {"size": f.size, "kind": f.kind, "device": f.device,
                                "result": f.result, "at": at}}));
    }
    ev
}

/// At most this many threads get a track of their own.
pub const MAX_THREAD_TRACKS: usize = 128;

/// A track per thread that allocated at the top suspects' sites (each suspect's sites, for the
/// first [`MAX_SUSPECT_TRACKS`] suspects; at most [`MAX_THREAD_TRACKS`] threads): the thread's
/// name, and a slice per site from its first to its latest allocation there, with its
/// allocations and bytes.
fn thread_tracks(r: &Report, ev: &mut Vec<Value>) {
    let pid = r.pid;
    let mut named: Vec<u32> = Vec::new();
    for (i, s) in r.suspects.iter().take(MAX_SUSPECT_TRACKS).enumerate() {
        let ids = if s.sites.is_empty() { vec![s.site] } else { s.sites.clone() };
        for site in ids.iter().filter_map(|&id| r.site(id)) {
            for t in &site.threads {
                if !named.contains(&t.tid) {
                    if named.len() >= MAX_THREAD_TRACKS {
                        continue;
                    }
                    named.push(t.tid);
                    let name =
                        if t.name.is_empty() { format!("thread {}", t.tid) } else { format!("{} ({})", t.name, t.tid) };
                    ev.push(json!({"name": "thread_name", "ph": "M", "pid": pid, "tid": t.tid, "ts": 0,
                                   "args": {"name": name}}));
                }
                let start = us(t.first_alloc_s);
                ev.push(
                    json!({"name": format!("suspect #{} site {}", i + 1, crate::report::words::site_id_name(site.id)),
                               "ph": "X", "pid": pid, "tid": t.tid, "ts": start,
                               "dur": (us(t.last_alloc_s) - start).max(1.0),
                               "args": {"allocations": t.alloc_count, "bytes": t.alloc_bytes,
                                        "at": s.headline}}),
                );
            }
        }
    }
}

impl Render for Perfetto {
    fn render(&self, r: &Report, out: &mut dyn Write) -> io::Result<()> {
        let doc = json!({
            "traceEvents": events(r),
            "displayTimeUnit": "ms",
            "otherData": {"generator": "gpushim", "schema": r.schema, "pid": r.pid,
                          "reason": r.reason.name(), "duration_s": r.duration_s},
        });
        serde_json::to_writer(&mut *out, &doc)?;
        writeln!(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::tests::{render, sample};

    #[test]
    fn perfetto_has_counter_tracks_of_the_timeline() {
        let text = render(&Perfetto, &sample());
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
        assert_eq!(failed[0]["name"], "cudaMalloc of 1.0 TiB failed (2)");
        assert_eq!(failed[0]["ts"], 1_250_000.0);
        assert!(events.iter().any(|e| e["ph"] == "M" && e["name"] == "process_name"));
    }

    #[test]
    fn perfetto_has_a_track_per_thread_of_the_top_sites() {
        let r = crate::render::text::tests::grouped();
        let v: serde_json::Value = serde_json::from_str(&render(&Perfetto, &r)).unwrap();
        let events = v["traceEvents"].as_array().unwrap();
        let names: Vec<(u64, &str)> = events
            .iter()
            .filter(|e| e["ph"] == "M" && e["name"] == "thread_name" && e["tid"] != 0)
            .map(|e| (e["tid"].as_u64().unwrap(), e["args"]["name"].as_str().unwrap()))
            .collect();
        assert_eq!(names, [(1200, "gemm-0 (1200)"), (1201, "thread 1201"), (1202, "gemm-2 (1202)")]);
        let slices: Vec<&serde_json::Value> = events.iter().filter(|e| e["ph"] == "X").collect();
        assert_eq!(slices.len(), 3);
        assert_eq!(slices[1]["tid"], 1201);
        assert_eq!(slices[1]["name"], "suspect #1 site 1");
        assert_eq!(slices[1]["ts"], 250_000.0);
        assert_eq!(slices[1]["dur"], 500_000.0);
        assert_eq!(slices[1]["args"]["allocations"], 2);
        assert_eq!(slices[1]["args"]["bytes"], 2 << 20);
    }
}
