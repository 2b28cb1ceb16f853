//! Collapsed stacks ("folded" format): one line per distinct stack, frames outermost first and
//! `;`-separated, then a space and the stack's live bytes. Flame-graph tools (inferno,
//! flamegraph.pl, speedscope) read it; the SVG format renders these same lines.

use std::collections::BTreeMap;
use std::io::{self, Write};

use super::{Render, TextOptions};
use crate::report::{Frame, Report, Site};

/// A frame's name in a folded line: its function, else `module+offset`, else its address.
/// `;` (the separator) becomes `:` and line breaks become spaces.
pub fn frame_name(f: &Frame) -> String {
    let name = if f.function != "??" && !f.function.is_empty() {
        f.function.clone()
    } else if !f.module.is_empty() {
        format!("{}+{}", f.module_name(), f.offset.as_deref().unwrap_or(&f.address))
    } else {
        f.address.clone()
    };
    name.replace(';', ":").replace(['\n', '\r'], " ")
}

/// The stack of one site as a folded line's frames (outermost first). Internal frames are
/// left out unless `all_frames` (or unless every frame is internal); a site without frames is
/// one frame, `[no backtrace]` or `[site N]`.
fn stack_of(s: &Site, all_frames: bool) -> String {
    let shown: Vec<&Frame> = if all_frames || s.frames.iter().all(|f| f.internal) {
        s.frames.iter().collect()
    } else {
        s.frames.iter().filter(|f| !f.internal).collect()
    };
    if shown.is_empty() {
        return if s.no_backtrace() { "[no backtrace]".to_string() } else { format!("[site {}]", s.id) };
    }
    shown.iter().rev().map(|f| frame_name(f)).collect::<Vec<_>>().join(";")
}

/// The folded stacks of the report's live bytes: `(stack, bytes)`, sorted by stack, identical
/// stacks added together, sites without live bytes left out.
pub fn lines(r: &Report, all_frames: bool) -> Vec<(String, u64)> {
    let mut m: BTreeMap<String, u64> = BTreeMap::new();
    for s in r.sites.iter().filter(|s| s.live_bytes > 0) {
        *m.entry(stack_of(s, all_frames)).or_default() += s.live_bytes;
    }
    m.into_iter().collect()
}

/// The folded format.
pub struct Folded(pub TextOptions);

impl Render for Folded {
    fn render(&self, r: &Report, out: &mut dyn Write) -> io::Result<()> {
        for (stack, bytes) in lines(r, self.0.all_frames) {
            writeln!(out, "{stack} {bytes}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::tests::{opts, render, sample};

    #[test]
    fn folded_lines_are_outermost_first_and_weighted_by_live_bytes() {
        let r = sample();
        assert_eq!(
            render(&Folded(opts(false)), &r),
            "[no backtrace] 10\n\
             main;load:weird;libfoo.so+0x1234 1024\n\
             main;render_frame 4194304\n"
        );
        assert_eq!(
            render(&Folded(opts(true)), &r),
            "[no backtrace] 10\n\
             main;load:weird;libfoo.so+0x1234 1024\n\
             main;render_frame;cudaMalloc 4194304\n"
        );
    }
}
