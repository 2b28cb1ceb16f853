//! A flame graph of live bytes as an SVG, drawn by the inferno crate from the folded lines.
//! A frame's width is the live bytes allocated under it; hovering shows bytes and share, and
//! clicking zooms (the SVG's own script, in a browser).

use std::io::{self, Write};

use inferno::flamegraph::color::{BasicPalette, Palette};
use inferno::flamegraph::{self, Options};

use super::{Render, TextOptions};
use crate::report::words::{fmt_bytes, shell_words};
use crate::report::Report;

/// The SVG format.
pub struct Svg(pub TextOptions);

/// The graph's title: it names the process and what is measured.
pub fn title(r: &Report) -> String {
    let what = match (r.snapshot, r.reason.name()) {
        (Some(n), _) => format!("snapshot {n}"),
        (None, reason) => reason.to_string(),
    };
    format!("gpushim: live bytes of pid {} ({what})", r.pid)
}

impl Render for Svg {
    fn render(&self, r: &Report, out: &mut dyn Write) -> io::Result<()> {
        let lines: Vec<String> = super::folded::lines(r, self.0.all_frames)
            .into_iter()
            .map(|(stack, bytes)| format!("{stack} {bytes}"))
            .collect();
        if lines.is_empty() {
            return empty(r, out);
        }
        let mut opts = Options::default();
        opts.title = title(r);
        opts.subtitle = Some(format!(
            "{}: {} live in {}; width is live bytes",
            shell_words(&r.command),
            fmt_bytes(r.totals.gauge.live_bytes),
            crate::report::words::count(r.totals.gauge.live_count, "allocation")
        ));
        opts.count_name = "bytes".to_string();
        opts.name_type = "Function:".to_string();
        opts.colors = Palette::Basic(BasicPalette::Mem);
        // Colours from the function names, so the same report always gives the same file.
        opts.hash = true;
        opts.deterministic = true;
        flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), out)
    }
}

/// A small SVG that says there is nothing to draw (inferno refuses empty input).
fn empty(r: &Report, out: &mut dyn Write) -> io::Result<()> {
    writeln!(
        out,
        r##"<?xml version="1.0" standalone="no"?>
<svg version="1.1" width="1200" height="80" viewBox="0 0 1200 80" xmlns="http://www.w3.org/2000/svg">
<rect x="0" y="0" width="100%" height="100%" fill="#eeeeee"/>
<text x="600" y="30" text-anchor="middle" font-family="Verdana" font-size="17">{}</text>
<text x="600" y="60" text-anchor="middle" font-family="Verdana" font-size="12">no live allocations in this report</text>
</svg>"##,
        xml_escape(&title(r))
    )
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::tests::{opts, render, sample};

    #[test]
    fn svg_is_a_flame_graph_of_the_folded_stacks() {
        let svg = render(&Svg(opts(false)), &sample());
        assert!(svg.contains("<svg"), "{svg}");
        for name in ["render_frame", "main", "load:weird", "libfoo.so+0x1234"] {
            assert!(svg.contains(name), "{name} missing");
        }
        assert!(svg.contains("gpushim: live bytes of pid 1234 (exit)"));
        assert!(!svg.contains("cudaMalloc"), "internal frames are hidden");
        // Same input, same bytes (colours come from the names).
        assert_eq!(svg, render(&Svg(opts(false)), &sample()));
        let mut empty = sample();
        empty.sites.clear();
        let svg = render(&Svg(opts(false)), &empty);
        assert!(svg.contains("<svg") && svg.contains("no live allocations"), "{svg}");
    }
}
