//! The exposition formats of a [`Snapshot`]: Prometheus's text format 0.0.4 and OpenMetrics
//! 1.0 text. For gauges and counters the two differ only in a few places, which this module
//! writes itself (a metrics crate would bring one of the two, and proc macros with it):
//! - a counter's family is named without `_total` in OpenMetrics (`# TYPE gpushim_frees
//!   counter`, sample `gpushim_frees_total`), with it in 0.0.4 (`# TYPE gpushim_frees_total
//!   counter`);
//! - OpenMetrics has `# UNIT` lines and ends with `# EOF`;
//! - OpenMetrics escapes `"` in `# HELP` text as well as `\` and newlines.
//!
//! Label values are escaped the same way in both (`\\`, `\"`, `\n`). Sources: "Exposition
//! formats" (prometheus.io/docs/instrumenting/exposition_formats) and the OpenMetrics 1.0
//! specification (github.com/OpenObservability/OpenMetrics, specification/OpenMetrics.md).

use std::fmt::Write as _;

use super::Snapshot;

/// The `Content-Type` of the Prometheus text format.
pub const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The `Content-Type` of OpenMetrics text.
pub const OPENMETRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Whether a request's `Accept` header asks for OpenMetrics (Prometheus sends
/// `application/openmetrics-text;version=1.0.0,…;q=0.75,text/plain;version=0.0.4;q=0.5,…`).
pub fn wants_openmetrics(accept: &str) -> bool {
    accept.split(',').any(|part| {
        let mut params = part.split(';').map(str::trim);
        let media = params.next().unwrap_or("");
        let refused = params.any(|p| p.replace(' ', "").eq_ignore_ascii_case("q=0"));
        media.eq_ignore_ascii_case("application/openmetrics-text") && !refused
    })
}

/// One metric family being written.
struct Family<'a> {
    out: &'a mut String,
    name: &'a str,
    counter: bool,
    /// The labels every sample carries first (the process's rank labels), already written as
    /// `k="v"` pairs joined by commas.
    common: &'a str,
}

impl Family<'_> {
    /// A sample of this family with `labels` after the common ones.
    fn sample(&mut self, labels: &[(&str, &str)], value: impl std::fmt::Display) {
        let suffix = if self.counter { "_total" } else { "" };
        let _ = write!(self.out, "{}{suffix}", self.name);
        let mut first = true;
        if !self.common.is_empty() || !labels.is_empty() {
            self.out.push('{');
            if !self.common.is_empty() {
                self.out.push_str(self.common);
                first = false;
            }
            for (k, v) in labels {
                if !first {
                    self.out.push(',');
                }
                first = false;
                let _ = write!(self.out, "{k}=\"");
                escape_into(self.out, v, true);
                self.out.push('"');
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {value}");
    }
}

/// Writes `s` escaped: `\` and newlines always, `"` when `quote`.
fn escape_into(out: &mut String, s: &str, quote: bool) {
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' if quote => out.push_str("\\\""),
            c => out.push(c),
        }
    }
}

/// The writer of a whole exposition.
struct Writer {
    out: String,
    openmetrics: bool,
    common: String,
}

impl Writer {
    /// Starts family `name` (without `_total`): its `# TYPE`, `# UNIT` (OpenMetrics, when the
    /// name ends with `_UNIT`) and `# HELP` lines.
    fn family(&mut self, name: &'static str, counter: bool, unit: &str, help: &str) -> Family<'_> {
        let kind = if counter { "counter" } else { "gauge" };
        let shown = if counter && !self.openmetrics { format!("{name}_total") } else { name.to_string() };
        let _ = writeln!(self.out, "# TYPE {shown} {kind}");
        if self.openmetrics && !unit.is_empty() {
            let _ = writeln!(self.out, "# UNIT {shown} {unit}");
        }
        let _ = write!(self.out, "# HELP {shown} ");
        escape_into(&mut self.out, help, self.openmetrics);
        self.out.push('\n');
        Family { out: &mut self.out, name, counter, common: &self.common }
    }
}

/// The exposition of `s`: OpenMetrics text when `openmetrics` (ending with `# EOF`), else
/// Prometheus text 0.0.4. Every sample carries the process's labels first (`pid`, and `rank`,
/// `local_rank`, `world_size`, `job_id` when known).
pub fn render(s: &Snapshot, openmetrics: bool) -> String {
    let mut common = String::new();
    for (k, v) in &s.labels {
        if !common.is_empty() {
            common.push(',');
        }
        let _ = write!(common, "{k}=\"");
        escape_into(&mut common, v, true);
        common.push('"');
    }
    let mut w = Writer { out: String::with_capacity(4096), openmetrics, common };

    let kinds = ["device", "managed", "pinned_host"];
    let mut f =
        w.family("gpushim_live_bytes", false, "bytes", "Bytes allocated and not yet freed, per kind of memory.");
    for (k, g) in kinds.iter().zip(&s.kinds) {
        f.sample(&[("kind", k)], g.live_bytes);
    }
    let mut f =
        w.family("gpushim_peak_live_bytes", false, "bytes", "Highest live bytes reached so far, per kind of memory.");
    for (k, g) in kinds.iter().zip(&s.kinds) {
        f.sample(&[("kind", k)], g.peak_live_bytes);
    }
    let mut f = w.family("gpushim_live_allocations", false, "", "Allocations not yet freed, per kind of memory.");
    for (k, g) in kinds.iter().zip(&s.kinds) {
        f.sample(&[("kind", k)], g.live_count);
    }
    w.family("gpushim_process_live_bytes", false, "bytes", "Bytes allocated and not yet freed, all kinds.")
        .sample(&[], s.totals.gauge.live_bytes);
    w.family("gpushim_process_peak_live_bytes", false, "bytes", "Highest live bytes reached so far, all kinds.")
        .sample(&[], s.totals.gauge.peak_live_bytes);

    let mut f = w.family(
        "gpushim_gpu_live_bytes",
        false,
        "bytes",
        "Device and managed bytes live on a GPU, by the ordinal the process saw and the GPU's name.",
    );
    for d in &s.gpus {
        f.sample(&[("ordinal", &d.ordinal.to_string()), ("gpu", &d.gpu)], d.gauge.live_bytes);
    }
    let mut f = w.family("gpushim_gpu_peak_live_bytes", false, "bytes", "Highest live bytes reached so far on a GPU.");
    for d in &s.gpus {
        f.sample(&[("ordinal", &d.ordinal.to_string()), ("gpu", &d.gpu)], d.gauge.peak_live_bytes);
    }

    let mut f = w.family(
        "gpushim_site_live_bytes",
        false,
        "bytes",
        "Live bytes of the allocation sites holding most (at most GPUSHIM_METRICS_TOP sites), by site id and first user frame.",
    );
    for site in &s.sites {
        f.sample(&[("site", &site.id), ("at", &site.at)], site.live_bytes);
    }
    let mut f = w.family("gpushim_site_live_allocations", false, "", "Live allocations of the same sites.");
    for site in &s.sites {
        f.sample(&[("site", &site.id), ("at", &site.at)], site.live_count);
    }
    w.family("gpushim_other_sites_live_bytes", false, "bytes", "Live bytes of all other sites.")
        .sample(&[], s.other_sites_live_bytes);
    w.family("gpushim_sites_live", false, "", "Allocation sites with live allocations.").sample(&[], s.sites_live);

    w.family("gpushim_suspects", false, "", "Leak suspects (sites that keep growing), recomputed every few seconds.")
        .sample(&[], s.suspects);
    let mut f = w.family(
        "gpushim_top_suspect_growth_bytes_per_second",
        false,
        "bytes_per_second",
        "How fast the most likely leak suspect's memory grew: bytes of its live allocations made after its first live one, per second of its live span; 0 without a suspect.",
    );
    match &s.top_suspect {
        Some(t) => f.sample(&[("site", &t.id), ("at", &t.at)], t.growth_bytes_per_s),
        None => f.sample(&[], 0),
    }

    w.family("gpushim_allocations", true, "", "Successful allocations.").sample(&[], s.totals.alloc_count);
    w.family("gpushim_allocated_bytes", true, "bytes", "Bytes of all successful allocations.")
        .sample(&[], s.totals.alloc_bytes);
    w.family("gpushim_frees", true, "", "Successful frees of known allocations.").sample(&[], s.totals.free_count);
    w.family("gpushim_allocation_failures", true, "", "Allocation calls that failed.")
        .sample(&[], s.totals.failed_count);
    w.family("gpushim_lost_events", true, "", "Events that never reached the collector (gaps in sequence numbers).")
        .sample(&[], s.totals.lost_events);
    if openmetrics {
        w.out.push_str("# EOF\n");
    }
    w.out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{GpuSample, SiteSample, TopSuspect};
    use crate::report::Totals;

    fn snapshot() -> Snapshot {
        let mut s = Snapshot {
            labels: vec![("pid".into(), "42".into()), ("rank".into(), "3".into())],
            totals: Totals { alloc_count: 5, alloc_bytes: 5 << 20, free_count: 2, ..Totals::default() },
            suspects: 1,
            ..Snapshot::default()
        };
        s.kinds[0].live_bytes = 3 << 20;
        s.kinds[0].peak_live_bytes = 4 << 20;
        s.kinds[0].live_count = 3;
        s.gpus.push(GpuSample { ordinal: 1, gpu: "GPU-x".into(), gauge: s.kinds[0] });
        s.sites.push(SiteSample { id: "7".into(), at: "f (a\"b.c:1)".into(), live_bytes: 3 << 20, live_count: 3 });
        s.top_suspect = Some(TopSuspect { id: "7".into(), at: "f".into(), growth_bytes_per_s: 1.5e6 });
        s
    }

    #[test]
    fn text_format_names_counters_with_total_and_has_no_eof() {
        let t = render(&snapshot(), false);
        assert!(t.contains("# TYPE gpushim_live_bytes gauge\n# HELP gpushim_live_bytes "), "{t}");
        assert!(t.contains("\ngpushim_live_bytes{pid=\"42\",rank=\"3\",kind=\"device\"} 3145728\n"), "{t}");
        assert!(t.contains("# TYPE gpushim_frees_total counter\n"), "{t}");
        assert!(t.contains("\ngpushim_frees_total{pid=\"42\",rank=\"3\"} 2\n"), "{t}");
        assert!(t.contains("gpushim_site_live_bytes{pid=\"42\",rank=\"3\",site=\"7\",at=\"f (a\\\"b.c:1)\"} 3145728\n"));
        assert!(t.contains("gpushim_gpu_live_bytes{pid=\"42\",rank=\"3\",ordinal=\"1\",gpu=\"GPU-x\"} 3145728\n"));
        assert!(t.contains(
            "gpushim_top_suspect_growth_bytes_per_second{pid=\"42\",rank=\"3\",site=\"7\",at=\"f\"} 1500000\n"
        ));
        assert!(!t.contains("# EOF") && !t.contains("# UNIT"), "{t}");
    }

    #[test]
    fn openmetrics_has_units_family_names_without_total_and_eof() {
        let t = render(&snapshot(), true);
        assert!(t.contains("# TYPE gpushim_frees counter\n"), "{t}");
        assert!(t.contains("\ngpushim_frees_total{pid=\"42\",rank=\"3\"} 2\n"), "{t}");
        assert!(t.contains("# TYPE gpushim_live_bytes gauge\n# UNIT gpushim_live_bytes bytes\n"), "{t}");
        assert!(t.contains("# UNIT gpushim_allocated_bytes bytes\n"), "{t}");
        assert!(t.ends_with("\n# EOF\n"), "{t}");
        // Every family once, every sample line of a family right after its metadata.
        let types: Vec<&str> = t.lines().filter(|l| l.starts_with("# TYPE ")).collect();
        let mut names: Vec<&str> = types.iter().map(|l| l.split(' ').nth(2).unwrap()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), types.len());
    }

    #[test]
    fn accept_headers() {
        let prom = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert!(wants_openmetrics(prom));
        assert!(!wants_openmetrics("*/*"));
        assert!(!wants_openmetrics("text/plain"));
        assert!(!wants_openmetrics("application/openmetrics-text; q=0"));
    }
}
