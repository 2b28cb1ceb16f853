//! Which format `gpushim report --format` writes: the [`Format`] values and the [`renderer`]
//! of each.

use super::folded::Folded;
use super::html::Html;
use super::json::Json;
use super::perfetto::Perfetto;
use super::svg::Svg;
use super::text::Text;
use super::torch_snapshot::TorchSnapshot;
use super::{Render, TextOptions};

/// The formats `gpushim report` offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// For a person: totals, suspects, top sites with their stacks.
    Text,
    /// The report as JSON, pretty-printed, with what its companion file adds: a snapshot's
    /// reachability scan (`X.reach.json`, written after the snapshot), its definitely lost
    /// counts and the suspects ordered by them.
    Json,
    /// Collapsed stacks weighted by live bytes, outermost frame first, for flame-graph tools.
    Folded,
    /// A flame graph of live bytes (SVG, drawn with inferno).
    Svg,
    /// Chrome trace-event JSON with counter tracks of live bytes over time, for
    /// ui.perfetto.dev.
    Perfetto,
    /// One self-contained HTML page: totals, live bytes over time, an interactive flame graph,
    /// the suspects and a sortable table of all sites; no network needed.
    Html,
    /// A pickle in the format of PyTorch's `torch.cuda.memory._snapshot()`, for
    /// pytorch.org/memory_viz and `torch.cuda._memory_viz` (docs/torch-snapshot.md).
    TorchSnapshot,
}

/// The renderer for `format`.
pub fn renderer(format: Format, opts: TextOptions) -> Box<dyn Render> {
    match format {
        Format::Text => Box::new(Text(opts)),
        Format::Json => Box::new(Json),
        Format::Folded => Box::new(Folded(opts)),
        Format::Svg => Box::new(Svg(opts)),
        Format::Perfetto => Box::new(Perfetto),
        Format::Html => Box::new(Html),
        Format::TorchSnapshot => Box::new(TorchSnapshot),
    }
}
