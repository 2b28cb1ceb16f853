//! The stream read: its start (the header and the Hello event), each event's time and place in
//! the sequence order, and what the Hello says about where reports go.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use gpushim_wire::{Decoder, Event, Hello};

use crate::account::live::Op;
use crate::error::{coded, BROKEN_STREAM};

/// The decoder of a stream read from `R`.
pub(super) type Stream<R> = Decoder<BufReader<R>>;

/// Opens the stream in `input` and reads its Hello event; `None` for an empty stream (the
/// target exited, or the shim gave up, before saying anything: nothing to report).
///
/// # Errors
/// If the stream breaks before its Hello event, or does not start with one (exit code
/// [`BROKEN_STREAM`]).
pub(super) fn open<R: Read>(input: R) -> Result<Option<(Stream<R>, Hello)>> {
    let mut input = BufReader::with_capacity(1 << 16, input);
    if input.fill_buf().context("reading the event stream")?.is_empty() {
        return Ok(None);
    }
    let mut dec = Decoder::new(input)
        .map_err(|e| coded(BROKEN_STREAM, format!("event stream broken at its start: {e}; no report written")))?;
    let hello = match dec.next_event() {
        Ok(Some(Event::Hello(h))) => h,
        Ok(Some(_)) => {
            return Err(coded(BROKEN_STREAM, "event stream does not start with a Hello event; no report written"))
        }
        Ok(None) => return Err(coded(BROKEN_STREAM, "event stream ended before its Hello event; no report written")),
        Err(e) => {
            return Err(coded(BROKEN_STREAM, format!("event stream broken at its start: {e}; no report written")))
        }
    };
    Ok(Some((dec, hello)))
}

/// The target's time of an allocation, free or failure; `None` for every other event.
pub(super) fn time_of(ev: &Event) -> Option<u64> {
    match ev {
        Event::Alloc(a) => Some(a.ts_ns),
        Event::Free(f) => Some(f.ts_ns),
        Event::Failed(f) => Some(f.ts_ns),
        _ => None,
    }
}

/// The event as an operation on the live set, applied in sequence order by the reorder
/// buffer; the event itself back when it is not one.
pub(super) fn op_of(ev: Event) -> Result<Op, Event> {
    Ok(match ev {
        Event::Alloc(a) => Op::Alloc(a),
        Event::Free(f) => Op::Free(f),
        Event::Failed(f) => Op::Failed(f),
        Event::FreePending(f) => Op::FreePending(f),
        Event::Reset(r) => Op::Reset(r),
        Event::ContextCreated(c) => Op::ContextCreated(c),
        Event::Map(m) => Op::Map(m),
        Event::Unmap(u) => Op::Unmap(u),
        Event::HandleRef(h) => Op::HandleRef(h),
        Event::GraphNode(n) => Op::GraphNode(Box::new(n)),
        Event::GraphExec(x) => Op::GraphExec(Box::new(x)),
        Event::GraphLaunch(l) => Op::GraphLaunch(l),
        Event::GraphExecDestroy(d) => Op::GraphExecDestroy(d),
        Event::GraphMemTrim(t) => Op::GraphMemTrim(t),
        other => return Err(other),
    })
}

/// A label as it may appear in a file name: the shim sends it reduced to `[A-Za-z0-9._-]`, at
/// most 64 characters, no leading dot; a stream from elsewhere is reduced the same way here.
pub(super) fn sanitize_label(raw: &str) -> String {
    let mut out: String = raw
        .chars()
        .take(64)
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') { c } else { '_' })
        .collect();
    if out.starts_with('.') {
        out.replace_range(..1, "_");
    }
    out
}

/// Where the target wants reports: Hello's output directory, relative to its working
/// directory if relative, else its working directory, else ours.
pub(super) fn output_dir_of(h: &Hello) -> PathBuf {
    let cwd = Path::new(&h.cwd);
    let dir = if h.output_dir.is_empty() { cwd } else { Path::new(&h.output_dir) };
    if dir.as_os_str().is_empty() {
        PathBuf::from(".")
    } else if dir.is_relative() && cwd.is_absolute() {
        cwd.join(dir)
    } else {
        dir.to_path_buf()
    }
}
