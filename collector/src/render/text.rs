//! The text format, for a person: the process and its totals, anomalies, the out-of-memory
//! failure of an out-of-memory report, the leak suspects, the top sites with their stacks, the
//! failed allocations and the notes; and the collector's closing summary on stderr, in the same
//! words.

use std::io::{self, Write};

use super::{Render, TextOptions};
use crate::report::words::{
    count, first_user_frame, fmt_bytes, fmt_period, fmt_score, fmt_seconds, frame_label, shell_words, site_id_name,
    site_name,
};
use crate::report::{Frame, Report, Site, Suspect, VmmTotals};

/// The report for a person.
pub struct Text(pub TextOptions);

impl Render for Text {
    fn render(&self, r: &Report, out: &mut dyn Write) -> io::Result<()> {
        let opts = self.0;
        let what = match r.snapshot {
            Some(n) => format!("snapshot {n}"),
            None => r.reason_words(),
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
            fmt_bytes(t.gauge.live_bytes),
            count(t.gauge.live_count, "allocation"),
            fmt_bytes(t.gauge.peak_live_bytes),
            count(t.alloc_count, "allocation"),
            frees_of(r, t.free_count),
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
        for v in &r.vmm {
            writeln!(out, "  {}", vmm_line(v))?;
        }
        if gpu_memory_shown(r) {
            for l in gpu_memory_lines(r) {
                writeln!(out, "  {l}")?;
            }
        }
        for l in kinds_section(r) {
            writeln!(out, "{l}")?;
        }
        // The lines the summary on stderr says of the scan, in the same words.
        if let Some(l) = lost_line(r) {
            writeln!(out, "{l}")?;
        }
        for l in scan_lines(r) {
            writeln!(out, "{l}")?;
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
            if let Some(l) = held_line(r) {
                writeln!(out, "{l}")?;
            }
        } else {
            writeln!(out, "leak suspects:")?;
            for (i, s) in r.suspects.iter().enumerate() {
                writeln!(
                    out,
                    "  #{} site {} (score {}): {}",
                    i + 1,
                    site_id_name(s.site),
                    fmt_score(s.score),
                    s.reason
                )?;
                if let Some(h) = suspect_headline(r, s) {
                    writeln!(out, "      at {h}")?;
                }
                if s.threads > 1 {
                    writeln!(out, "      from {} threads", s.threads)?;
                }
                if s.sites.len() > 1 {
                    let list: Vec<String> = s
                        .sites
                        .iter()
                        .map(|&id| match r.site(id) {
                            Some(x) => format!("{} ({})", site_id_name(id), fmt_bytes(x.live_bytes)),
                            None => site_id_name(id),
                        })
                        .collect();
                    writeln!(out, "      {} sites: {}", s.sites.len(), list.join(", "))?;
                }
                for l in suspect_holder_lines(r, s, 5) {
                    writeln!(out, "      {l}")?;
                }
            }
        }

        if !r.suppressed.is_empty() {
            writeln!(out, "{}", suppressed_line(r))?;
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
                    frees_of(r, s.free_count),
                    fmt_bytes(s.peak_live_bytes),
                )?;
                if let Some((w, h)) = r.holders.as_ref().and_then(|h| Some((h.walk.status.as_str(), h.site(s.id)?))) {
                    for l in crate::explain::holders::site_lines(h, 5, w) {
                        writeln!(out, "      {l}")?;
                    }
                }
                if s.thread_count > 1 {
                    writeln!(out, "      {}", threads_line(s))?;
                }
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

/// What a suspect is named by: its headline, or in a report without one (older collectors) the
/// first user frame of its site.
/// What a report without suspects saw of growth that held still (`held_growth`), in words:
/// `the largest growth held still: 512.0 KiB in 8 allocations at warm (w.py:9), grown over
/// 36 ms, then held for 1.5 s: a warm-up or a cache filled once`.
pub fn held_line(r: &Report) -> Option<String> {
    let h = r.held_growth.as_ref()?;
    let at = r.site(h.site).and_then(first_user_frame).map(|f| format!(" at {}", frame_label(f))).unwrap_or_default();
    let what = if h.pool { "a caching pool at its working set" } else { "a warm-up or a cache filled once" };
    // In the program's own steps where the stream counted them: a fast warm-up holds still for
    // little wall time but many calls.
    let calls = match (h.grew_calls, h.held_calls) {
        (Some(g), Some(a)) if a > g => {
            format!(" ({} while it grew, {} after)", count(g, "GPU call"), count(a, "GPU call"))
        }
        _ => String::new(),
    };
    Some(format!(
        "the largest growth held still: {} in {}{at}, grown over {}, then held for {}{calls}: {what}",
        fmt_bytes(h.live_bytes),
        count(h.live_count, "allocation"),
        fmt_period(h.grew_s),
        fmt_period(h.held_s),
    ))
}

fn suspect_headline(r: &Report, s: &Suspect) -> Option<String> {
    if !s.headline.is_empty() {
        return Some(s.headline.chars().map(|c| if c.is_control() { '?' } else { c }).collect());
    }
    r.site(s.site).and_then(first_user_frame).map(frame_label)
}

/// The threads of a site for a person: `from 100 threads: gemm-0 (tid 1201, 1 allocation), …`,
/// the first three.
fn threads_line(s: &Site) -> String {
    let shown: Vec<String> = s
        .threads
        .iter()
        .take(3)
        .map(|t| {
            let name: String = t.name.chars().map(|c| if c.is_control() { '?' } else { c }).collect();
            let who = if name.is_empty() { format!("tid {}", t.tid) } else { format!("{name} (tid {}", t.tid) };
            let close = if name.is_empty() { "" } else { ")" };
            format!("{who}{close}, {}", count(t.alloc_count, "allocation"))
        })
        .collect();
    let more = if s.thread_count > 3 { ", …" } else { "" };
    format!("from {} threads: {}{more}", s.thread_count, shown.join("; "))
}

/// The suspects that suppressions hid, in one line: `2 suspect sites suppressed:
/// pytorch-library-handle-pool (2 sites, 64.0 MiB)`.
fn suppressed_line(r: &Report) -> String {
    let n: usize = r.suppressed.iter().map(|x| x.sites.len()).sum();
    let parts: Vec<String> = r
        .suppressed
        .iter()
        .map(|x| format!("{} ({}, {})", x.suppression, count(x.sites.len() as u64, "site"), fmt_bytes(x.live_bytes)))
        .collect();
    format!("{} suppressed: {}", count(n as u64, "suspect site"), parts.join(", "))
}

/// Who holds a suspect's memory (the heap walk's lines, at most `max` holders per site): its
/// site's, or for the union of the sites of one line (`line_sites`) every member's that the
/// walk found objects in, each headed by its site.
pub fn suspect_holder_lines(r: &Report, s: &crate::report::Suspect, max: usize) -> Vec<String> {
    let Some(h) = r.holders.as_ref() else { return Vec::new() };
    let members: Vec<&crate::report::SiteHolders> = if s.line_sites.is_empty() {
        h.site(s.site).into_iter().collect()
    } else {
        // The holders file lists sites by live bytes, most first: the same order here.
        h.sites.iter().filter(|x| x.site.is_some_and(|id| s.line_sites.contains(&id))).collect()
    };
    if let [one] = members.as_slice() {
        if one.site == Some(s.site) {
            return crate::explain::holders::site_lines(one, max, &h.walk.status);
        }
    }
    let mut out = Vec::new();
    for m in members {
        let mut lines = crate::explain::holders::site_lines(m, max, &h.walk.status);
        if let Some(first) = lines.first_mut() {
            *first = format!("site {}: {first}", m.site.map_or_else(String::new, site_id_name));
        }
        out.append(&mut lines);
    }
    out
}

/// Writes up to `opts.depth` frames, one per line, internal ones only with `all_frames`.
fn write_frames(out: &mut dyn Write, frames: &[Frame], opts: TextOptions, indent: &str) -> io::Result<()> {
    let shown: Vec<&Frame> = frames.iter().filter(|f| opts.all_frames || !f.internal).collect();
    for f in shown.iter().take(opts.depth) {
        writeln!(out, "{indent}{}", frame_label(f))?;
    }
    if shown.len() > opts.depth {
        writeln!(out, "{indent}… {}", count((shown.len() - opts.depth) as u64, "more frame"))?;
    }
    if frames.is_empty() {
        writeln!(out, "{indent}(no backtrace)")?;
    }
    Ok(())
}

/// One device's virtual memory management use in words, e.g. `VMM on GPU 0: 1 handle,
/// 64.0 MiB created (64.0 MiB released, kept by its mappings); 64.0 MiB mapped in 1 mapping
/// (peak 64.0 MiB)`.
pub fn vmm_line(v: &VmmTotals) -> String {
    let on = if v.ordinal >= 0 { format!("GPU {}", v.ordinal) } else { "host or unknown device".to_string() };
    let mut s = format!("VMM on {on}: {}, {} created", count(v.handles, "handle"), fmt_bytes(v.created_bytes));
    if v.released_mapped > 0 {
        s += &format!(
            " ({} released, kept by {} mappings)",
            fmt_bytes(v.released_mapped_bytes),
            if v.released_mapped == 1 { "its" } else { "their" }
        );
    }
    if v.imported_handles > 0 {
        s += &format!(", {}", count(v.imported_handles, "imported handle"));
    }
    s += &format!(
        "; {} mapped in {} (peak {})",
        fmt_bytes(v.mapped_bytes),
        count(v.mappings, "mapping"),
        fmt_bytes(v.peak_mapped_bytes)
    );
    s
}

/// The counters that mean something was off, in words; empty if none.
fn anomalies(r: &Report) -> Vec<String> {
    let t = &r.totals;
    [
        (t.unknown_free_count, "frees of unknown addresses"),
        (t.failed_free_count, "failed frees"),
        (t.replaced_count, "addresses returned again while live (missed frees)"),
        (t.lost_events, "events lost"),
        (t.unknown_unmap_count, "unmaps of unknown ranges"),
    ]
    .iter()
    .filter(|(n, _)| *n > 0)
    .map(|(n, what)| format!("{n} {what}"))
    .collect()
}

/// Where the GPU memory is, one line per GPU (its three largest owners, then the untraced
/// remainder or why it is unknown), then the findings.
pub fn gpu_memory_lines(r: &Report) -> Vec<String> {
    let mut out = Vec::new();
    for g in &r.gpu_memory {
        let mut owners: Vec<String> =
            g.owners.iter().take(3).map(|o| format!("{} {}", o.owner, fmt_bytes(o.live_bytes))).collect();
        if g.owners.len() > 3 {
            owners.push(format!("{} more owners", g.owners.len() - 3));
        }
        let owners = if owners.is_empty() { "nothing traced".to_string() } else { owners.join(", ") };
        let untraced = match (g.untraced_bytes, g.driver_bytes) {
            (Some(u), Some(d)) => format!("untraced {} (the driver counts {})", fmt_bytes(u), fmt_bytes(d)),
            _ => format!("untraced {}", if g.driver_note.is_empty() { "unknown" } else { &g.driver_note }),
        };
        out.push(format!("GPU {} memory: {owners}; {untraced}", g.ordinal));
    }
    out.extend(r.findings.iter().map(|f| format!("finding: {f}")));
    out
}

/// Whether the report says where the GPU memory is (`GPU 0 memory: …`, in the text report and
/// the summary on stderr alike): when the NVIDIA driver could be asked, or NVML was off on a
/// machine that may have one, or there are findings. Without a GPU (no NVIDIA driver, or the
/// demo, whose examples run on the stand-ins) the line would only repeat the live line.
pub fn gpu_memory_shown(r: &Report) -> bool {
    let no_gpu = |note: &str| {
        note.strip_prefix("unknown: ")
            .is_some_and(|n| n.starts_with(crate::explain::nvml::NO_NVML) || n == crate::explain::nvml::DEMO_NVML_OFF)
    };
    !r.findings.is_empty() || r.gpu_memory.iter().any(|g| !no_gpu(&g.driver_note))
}

/// `n` frees, said as the program's when a teardown freed what the report counts as live
/// ("0 frees by the program" beside "200 allocations were freed only by the interpreter's
/// teardown").
fn frees_of(r: &Report, n: u64) -> String {
    if r.interpreter_teardown.is_some() || !r.context_teardowns.is_empty() {
        format!("{} by the program", count(n, "free"))
    } else {
        count(n, "free")
    }
}

/// The first line of the summary and of the scan's lines in the text report, when the
/// reachability scan found anything definitely lost: `definitely lost: 200.0 MiB in 200
/// allocations (no pointer left in the program's memory)`.
pub fn lost_line(r: &Report) -> Option<String> {
    r.reachability.as_ref().and_then(crate::explain::reach::lead_line)
}

/// The reachability scan in words, the same in the summary on stderr and the text report: one
/// line whenever the report has a scan (`reachability scan complete: 0 lost, 0 indirectly lost,
/// 200 reachable (…)`: a program whose memory is all still referred to says so, as its JSON
/// does), then its note, if any.
pub fn scan_lines(r: &Report) -> Vec<String> {
    let Some(x) = &r.reachability else { return Vec::new() };
    let mut out = vec![crate::explain::reach::scan_line(x)];
    out.extend(x.note.iter().map(|n| format!("reachability: {n}")));
    out
}

/// One line per GPU of the device memory by kind (the kinds that hold bytes):
/// `GPU 0 by kind of memory: parameters 12.0 MiB, gradients 12.0 MiB, …`.
pub fn kinds_lines(kinds: &[crate::report::DeviceKinds]) -> Vec<String> {
    kinds
        .iter()
        .map(|d| {
            let parts: Vec<String> = d
                .kinds
                .iter()
                .filter(|k| k.bytes > 0)
                .map(|k| format!("{} {}", k.words(), fmt_bytes(k.bytes)))
                .collect();
            let parts = if parts.is_empty() { "nothing traced".to_string() } else { parts.join(", ") };
            format!("GPU {} by kind of memory: {parts}", d.ordinal)
        })
        .collect()
}

/// The text report's section of the memory by kind: per GPU, each kind with its bytes, objects
/// and top lines.
fn kinds_section(r: &Report) -> Vec<String> {
    let mut out = Vec::new();
    for d in &r.memory_kinds {
        let driver = d.driver_bytes.map(|b| format!(", the driver counts {}", fmt_bytes(b))).unwrap_or_default();
        out.push(format!(
            "GPU {} by kind of memory (the heap walk's objects: tensors and arrays {} of {} traced{driver}):",
            d.ordinal,
            fmt_bytes(d.tensor_bytes),
            fmt_bytes(d.traced_bytes)
        ));
        // Only the kinds that hold bytes: a program without PyTorch has no parameters to list.
        for k in d.kinds.iter().filter(|k| k.bytes > 0) {
            let objects = if k.objects > 0 { format!(" in {}", count(k.objects, "object")) } else { String::new() };
            out.push(format!("  {:<32} {:>10}{objects}", k.words(), fmt_bytes(k.bytes)));
            for l in &k.lines {
                out.push(format!("      {:>10}  {} ({})", fmt_bytes(l.bytes), l.line, count(l.objects, "object")));
            }
        }
    }
    out
}

/// The collector's closing lines on stderr (each starting `gpushim: `): totals, up to three
/// suspects or "no leak suspects", and where the report went.
pub fn summary(r: &Report, path: &std::path::Path, out: &mut dyn Write) -> io::Result<()> {
    summary_lines(r, out)?;
    writeln!(out, "gpushim: report written to {}", crate::report::output::in_a_line(path))
}

/// The summary's lines but the last (where the report went): also printed when no directory
/// took the report, so the totals are not lost with it.
pub fn summary_lines(r: &Report, out: &mut dyn Write) -> io::Result<()> {
    if let Some(l) = lost_line(r) {
        writeln!(out, "gpushim: pid {}: {l}", r.pid)?;
    }
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
        r.reason_words(),
        t.gauge.live_count,
        if t.gauge.live_count == 1 { "" } else { "s" },
        fmt_bytes(t.gauge.live_bytes),
        fmt_bytes(t.gauge.peak_live_bytes),
    )?;
    if let Some(t) = &r.interpreter_teardown {
        writeln!(
            out,
            "gpushim: {} ({}) {} freed only by the interpreter's teardown, after the exit heap walk",
            crate::report::words::count(t.count, "allocation"),
            fmt_bytes(t.bytes),
            if t.count == 1 { "was" } else { "were" }
        )?;
    }
    for v in &r.vmm {
        writeln!(out, "gpushim: {}", vmm_line(v))?;
    }
    for l in scan_lines(r) {
        writeln!(out, "gpushim: {l}")?;
    }
    if gpu_memory_shown(r) {
        for l in gpu_memory_lines(r) {
            writeln!(out, "gpushim: {l}")?;
        }
    }
    for l in kinds_lines(&r.memory_kinds) {
        writeln!(out, "gpushim: {l}")?;
    }
    if r.suspects.is_empty() {
        writeln!(out, "gpushim: no leak suspects")?;
        if let Some(l) = held_line(r) {
            writeln!(out, "gpushim: {l}")?;
        }
    }
    for (i, s) in r.suspects.iter().take(3).enumerate() {
        // The reason ends in words ("none freed"): the place follows as its own clause.
        let mut at = suspect_headline(r, s).map(|h| format!("; allocated at {h}")).unwrap_or_default();
        if s.threads > 1 {
            at += &format!(", from {} threads", s.threads);
        }
        if s.sites.len() > 1 {
            let ids: Vec<String> = s.sites.iter().map(|&id| site_id_name(id)).collect();
            at += &format!("; {} sites: {}", s.sites.len(), ids.join(", "));
        }
        writeln!(out, "gpushim: suspect #{} site {}: {}{at}", i + 1, site_id_name(s.site), s.reason)?;
        for l in suspect_holder_lines(r, s, 3) {
            writeln!(out, "gpushim:     {l}")?;
        }
    }
    if r.suspects.len() > 3 {
        writeln!(out, "gpushim: {} in the report", count((r.suspects.len() - 3) as u64, "more suspect"))?;
    }
    if !r.suppressed.is_empty() {
        writeln!(out, "gpushim: {}", suppressed_line(r))?;
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::render::json::Json;
    use crate::render::tests::{opts, render, sample, CONTRACT_ONLY};

    #[test]
    fn text_hides_internal_frames_unless_asked() {
        let r = Report::from_slice(CONTRACT_ONLY.as_bytes()).unwrap();
        let text = |opts| {
            let mut out = Vec::new();
            Text(opts).render(&r, &mut out).unwrap();
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
        Json.render(&r, &mut json).unwrap();
        assert_eq!(Report::from_slice(&json).unwrap(), r);

        let mut err = Vec::new();
        summary(&r, std::path::Path::new("/o/gpushim-1234.json"), &mut err).unwrap();
        assert_eq!(
            String::from_utf8(err).unwrap(),
            "gpushim: pid 1234 (exit): 10 allocations live, 10.0 MiB (device 10.0 MiB on GPU 0); peak 10.0 MiB\n\
             gpushim: suspect #1 site 3: 10 allocations live (10.0 MiB), none freed; allocated at render_frame (app/target.c:42)\n\
             gpushim: report written to /o/gpushim-1234.json\n"
        );
    }

    /// `sample()` with its suspect made a group of sites 1 and 5 from 100 threads, and a
    /// suppressed suspect.
    pub(crate) fn grouped() -> Report {
        use crate::report::{SiteThread, Suppressed};
        let mut r = sample();
        let s = &mut r.suspects[0];
        s.sites = vec![1, 5];
        s.headline = "worker_gemm (src/file.c:7) via cublasCreate_v2".into();
        s.threads = 100;
        s.reason = "2 sites, 4 live (4.0 MiB) in all; the largest: +1.0 MiB per 500 ms over 1 s".into();
        r.sites[0].thread_count = 100;
        r.sites[0].threads = (0..3u32)
            .map(|i| SiteThread {
                tid: 1200 + i,
                name: if i == 1 { String::new() } else { format!("gemm-{i}") },
                alloc_count: 3 - u64::from(i),
                alloc_bytes: (3 - u64::from(i)) << 20,
                first_alloc_s: 0.25 * f64::from(i),
                last_alloc_s: 0.5 + 0.25 * f64::from(i),
            })
            .collect();
        r.suppressed =
            vec![Suppressed { suppression: "pytorch-library-handle-pool".into(), sites: vec![2, 4], live_bytes: 1024 }];
        r
    }

    #[test]
    fn a_grouped_suspect_shows_its_headline_threads_and_sites() {
        let r = grouped();
        let t = render(&Text(opts(false)), &r);
        assert!(
            t.contains(
                "  #1 site 1 (score 1.00): 2 sites, 4 live (4.0 MiB) in all; the largest: +1.0 MiB per 500 ms over 1 s\n\
                 \x20     at worker_gemm (src/file.c:7) via cublasCreate_v2\n\
                 \x20     from 100 threads\n\
                 \x20     2 sites: 1 (3.0 MiB), 5 (1.0 MiB)\n"
            ),
            "{t}"
        );
        assert!(t.contains("2 suspect sites suppressed: pytorch-library-handle-pool (2 sites, 1.0 KiB)\n"), "{t}");
        assert!(
            t.contains("      from 100 threads: gemm-0 (tid 1200), 3 allocations; tid 1201, 2 allocations; gemm-2 (tid 1202), 1 allocation, …\n"),
            "{t}"
        );
        let mut err = Vec::new();
        summary(&r, std::path::Path::new("/o/g.json"), &mut err).unwrap();
        let err = String::from_utf8(err).unwrap();
        assert!(
            err.contains("gpushim: suspect #1 site 1: 2 sites, 4 live (4.0 MiB) in all; the largest: +1.0 MiB per 500 ms over 1 s; allocated at worker_gemm (src/file.c:7) via cublasCreate_v2, from 100 threads; 2 sites: 1, 5\n"),
            "{err}"
        );
        assert!(
            err.contains("gpushim: 2 suspect sites suppressed: pytorch-library-handle-pool (2 sites, 1.0 KiB)\n"),
            "{err}"
        );
        // The JSON keeps it all.
        let mut json = Vec::new();
        Json.render(&r, &mut json).unwrap();
        assert_eq!(Report::from_slice(&json).unwrap(), r);
    }

    /// The site of the allocations recorded without a backtrace (id `NO_STACK`) is named in
    /// words in the sites, the suspects and the stderr summary, never by the sentinel's number.
    #[test]
    fn the_site_without_backtrace_is_named_in_words() {
        let mut r = sample();
        r.suspects[0].site = gpushim_wire::NO_STACK;
        r.suspects[0].sites = vec![gpushim_wire::NO_STACK, 2];
        let t = render(&Text(opts(false)), &r);
        assert!(t.contains("  site without backtrace: 10 B live in 1 (device, cudaMalloc); "), "{t}");
        assert!(t.contains("  #1 site without backtrace (score 1.00): "), "{t}");
        assert!(t.contains("      2 sites: without backtrace (10 B), 2 (1.0 KiB)\n"), "{t}");
        let mut err = Vec::new();
        summary(&r, std::path::Path::new("/o/gpushim-1234.json"), &mut err).unwrap();
        let err = String::from_utf8(err).unwrap();
        assert!(err.contains("gpushim: suspect #1 site without backtrace: "), "{err}");
        assert!(err.contains("; 2 sites: without backtrace, 2\n"), "{err}");
        for out in [&t, &err] {
            assert!(!out.contains("4294967295"), "{out}");
        }
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
        let t = render(&Text(opts(false)), &r);
        assert!(
            t.contains(
                "out of memory: cudaMalloc of 3.0 GiB (device) on GPU 0 returned 2 at 1.5 s\n  \
                 the driver reported 1.0 GiB free of 80.0 GiB\n      render_frame (app+0x200)\n"
            ),
            "{t}"
        );
        assert!(t.starts_with("pid 1234 (oom): "), "{t}");
    }

    /// A suspect that is the union of the sites of one line (1 and 5) lists the holders of
    /// each member site, headed by its site, in the text report and the stderr summary.
    #[test]
    fn a_union_suspect_lists_the_holders_of_every_member_site() {
        let mut r = sample();
        crate::render::tests::union_with_holders(&mut r);
        let mut out = Vec::new();
        Text(TextOptions::default()).render(&r, &mut out).unwrap();
        let t = String::from_utf8(out).unwrap();
        assert!(t.contains("      site 1: Python objects hold all 3.0 MiB live (3 objects, 3.0 MiB)\n"), "{t}");
        assert!(t.contains("      held by: train.py global 'history' \u{2192} 3 objects\n"), "{t}");
        assert!(t.contains("      site 5: Python objects hold all 1.0 MiB live (2 objects, 1.0 MiB)\n"), "{t}");
        assert!(t.contains("      held by: train.py global 'cache' \u{2192} 2 objects\n"), "{t}");
        let mut err = Vec::new();
        summary(&r, std::path::Path::new("/o/gpushim-1234.json"), &mut err).unwrap();
        let e = String::from_utf8(err).unwrap();
        assert!(e.contains("gpushim:     held by: train.py global 'history' \u{2192} 3 objects\n"), "{e}");
        assert!(e.contains("gpushim:     held by: train.py global 'cache' \u{2192} 2 objects\n"), "{e}");
    }

    /// A scan that found everything reachable (a Python list holds the buffers) still gets its
    /// line, in the text report as on stderr, as its JSON says it was made; the definitely lost
    /// line comes only with something lost, first on stderr and before the scan's line in the text.
    #[test]
    fn the_scan_has_one_line_in_the_text_and_on_stderr_whatever_it_found() {
        use crate::report::Reachability;
        let mut r = sample();
        r.reachability = Some(Reachability {
            status: "complete".into(),
            elapsed_ms: 21.0,
            scanned_bytes: 13 << 20,
            reachable_count: 200,
            reachable_bytes: 200 << 20,
            ..Reachability::default()
        });
        let line = "reachability scan complete: 0 lost, 0 indirectly lost, 200 reachable (13.0 MiB read in 21 ms)\n";
        let t = render(&Text(opts(false)), &r);
        assert!(t.contains(&format!("\n{line}")) && !t.contains("definitely lost"), "{t}");
        let mut err = Vec::new();
        summary(&r, std::path::Path::new("/o/g.json"), &mut err).unwrap();
        let err = String::from_utf8(err).unwrap();
        assert!(err.contains(&format!("\ngpushim: {line}")) && !err.contains("definitely lost"), "{err}");

        let x = r.reachability.as_mut().unwrap();
        (x.definitely_lost_count, x.definitely_lost_bytes, x.reachable_count) = (200, 200 << 20, 1);
        x.note = Some("the heap could not be walked".into());
        let lost = "definitely lost: 200.0 MiB in 200 allocations (no pointer left in the program's memory)\n";
        let scan = "reachability scan complete: 200 lost, 0 indirectly lost, 1 reachable (13.0 MiB read in 21 ms)\n\
                    reachability: the heap could not be walked\n";
        let t = render(&Text(opts(false)), &r);
        assert!(t.contains(&format!("\n{lost}{scan}")), "{t}");
        let mut err = Vec::new();
        summary(&r, std::path::Path::new("/o/g.json"), &mut err).unwrap();
        let err = String::from_utf8(err).unwrap();
        assert!(err.starts_with(&format!("gpushim: pid 1234: {lost}")), "{err}");
        assert!(err.contains(&format!("\ngpushim: {}", scan.replace("\nreach", "\ngpushim: reach"))), "{err}");
    }

    /// The line of where the GPU memory is comes in the text report exactly when it comes on
    /// stderr: not without a GPU (no NVIDIA driver, or the demo's stand-ins), and with a
    /// driver's view or a finding.
    #[test]
    fn the_gpu_memory_line_is_in_the_text_exactly_when_on_stderr() {
        use crate::explain::nvml::{DEMO_NVML_OFF, NO_NVML};
        use crate::report::{GpuMemory, OwnerBytes};
        let mut r = sample();
        let owner =
            OwnerBytes { owner: "user code (direct calls)".into(), live_bytes: 3 << 20, ..OwnerBytes::default() };
        let gpu = |note: String, driver: Option<u64>| GpuMemory {
            ordinal: 0,
            owners: vec![owner.clone()],
            traced_bytes: 3 << 20,
            driver_bytes: driver,
            untraced_bytes: driver.map(|d| d - (3 << 20)),
            driver_note: note,
            ..GpuMemory::default()
        };
        for (g, findings, shown) in [
            (gpu(format!("unknown: {NO_NVML}: libnvidia-ml.so.1 not found"), None), vec![], false),
            (gpu(format!("unknown: {DEMO_NVML_OFF}"), None), vec![], false),
            (gpu(format!("unknown: {DEMO_NVML_OFF}"), None), vec!["GPU 0: something".to_string()], true),
            (gpu("unknown: NVML sampling is off (GPUSHIM_NVML=0)".into(), None), vec![], true),
            (gpu(String::new(), Some(300 << 20)), vec![], true),
        ] {
            r.gpu_memory = vec![g];
            r.findings = findings;
            let t = render(&Text(opts(false)), &r);
            let mut err = Vec::new();
            summary(&r, std::path::Path::new("/o/g.json"), &mut err).unwrap();
            let err = String::from_utf8(err).unwrap();
            assert_eq!(t.contains("  GPU 0 memory: user code (direct calls) 3.0 MiB; untraced "), shown, "{t}");
            assert_eq!(
                err.contains("gpushim: GPU 0 memory: user code (direct calls) 3.0 MiB; untraced "),
                shown,
                "{err}"
            );
        }
    }
}
