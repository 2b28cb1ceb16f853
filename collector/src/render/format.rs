//! Which format `gpushim report --format` writes: the [`Format`] values and the [`renderer`]
//! of each.

use super::folded::Folded;
use super::json::Json;
use super::perfetto::Perfetto;
use super::svg::Svg;
use super::text::Text;
use super::{Render, TextOptions};

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
