//! Who holds the memory: the result of a heap walk inside a CPython target (the wire's
//! `HeapWalk`: the Python objects that own GPU memory, each with a grouped path from a root),
//! attributed to the live allocations that contain the objects' memory, per site. Written as a
//! companion file beside the report it completes (`…-snapshot-<n>.holders.json`,
//! `…-oom-<n>.holders.json`, `gpushim-<pid>.holders.json`; docs/report-schema.md), and read back
//! by `gpushim report` and `gpushim diff` when present.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use gpushim_wire::{HeapWalk, WalkReason, WalkStatus};
use serde::Deserialize;

use crate::account::live::State;
use crate::report::words::fmt_bytes;
pub use crate::report::{
    BlockFrame, BlockStack, HeldObject, HolderLine, Holders, SiteHolders, Walk, HOLDERS_SCHEMA as SCHEMA,
};

/// Most objects listed per site (the largest).
pub const TOP_OBJECTS: usize = 10;
/// Most sites listed (most live bytes first).
pub const MAX_SITES: usize = 1000;
/// Most stacks of PyTorch blocks listed per site (most bytes first).
pub const TOP_BLOCK_STACKS: usize = 10;

/// The walker's result as it comes in the `HeapWalk` event.
#[derive(Debug, Default, Deserialize)]
struct Walked {
    #[serde(default)]
    objects: Vec<WalkedObject>,
    #[serde(default)]
    holders: Vec<WalkedHolder>,
    #[serde(default)]
    found: u64,
    /// PyTorch's caching allocator segments, `[address, total bytes, allocated bytes]`, when
    /// the program had initialized CUDA in PyTorch.
    #[serde(default)]
    torch_segments: Option<Vec<[u64; 3]>>,
    /// The Python stacks of PyTorch's live blocks, each once: `[file, line, function]` frames,
    /// innermost first. Read entry by entry ([`block_stacks`]): a malformed one drops itself.
    #[serde(default)]
    torch_stacks: serde_json::Value,
    /// PyTorch's live blocks with a recorded stack, grouped by segment and stack:
    /// `[segment address, blocks, bytes, index in torch_stacks]` ([`block_groups`]).
    #[serde(default)]
    torch_blocks: serde_json::Value,
    /// `native` or `python`: which core walked.
    #[serde(default)]
    core: Option<String>,
}

#[derive(Debug, Deserialize)]
struct WalkedObject {
    ptr: u64,
    nbytes: u64,
    desc: String,
    holder: usize,
    /// What the walker could tell of its role (`parameter`, `grad`, `optimizer_state`).
    #[serde(default)]
    role: Option<String>,
    /// The index in `torch_stacks` of the block its memory starts in.
    #[serde(default)]
    stack: Option<usize>,
}

#[derive(Debug, Deserialize)]
struct WalkedHolder {
    how: String,
    path: Vec<String>,
    #[serde(default)]
    saved_for: Option<String>,
    #[serde(default)]
    graphs: u64,
    #[serde(default)]
    graph_nodes: u64,
}

/// An object with the `[start, end)` of the live allocation holding it, if any.
type Placed<'a> = (&'a WalkedObject, Option<(u64, u64)>);

/// The name of `r`, as the companion file says it.
pub fn reason_name(r: WalkReason) -> &'static str {
    match r {
        WalkReason::Snapshot => "snapshot",
        WalkReason::Oom => "oom",
        WalkReason::Exit => "exit",
    }
}

fn status_name(s: WalkStatus) -> &'static str {
    match s {
        WalkStatus::Complete => "complete",
        WalkStatus::Cut => "cut",
        WalkStatus::Blocked => "blocked",
        WalkStatus::Failed => "failed",
        WalkStatus::Skipped => "skipped",
    }
}

/// `n` with a comma between groups of three digits (`16,004`).
fn thousands(n: u64) -> String {
    let d = n.to_string();
    let mut out = String::new();
    for (i, c) in d.chars().enumerate() {
        if i > 0 && (d.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A step of a holder's path with its file named as a frame's file is (`words::short_path` of
/// `Python::resolve`: made absolute against the program's working directory, then its
/// directory and its name), so that a location and a holder name one file alike: the root of
/// a global, which the walker names by the module's path (`/home/u/ws4/train.py global
/// 'history'` reads `ws4/train.py global 'history'`), and a frame, which the walker names by
/// its code's `co_filename` (`function 'main' (../train.py:57) local 'model'` reads `function
/// 'main' (ws4/train.py:57) local 'model'`). Any other step is kept.
fn named_step(step: &str, root: bool, py: &crate::explain::pyframes::Python) -> String {
    let name = |file: &str| crate::report::words::short_path(&py.resolve(file)).into_owned();
    if let Some(rest) = step.strip_prefix("function '") {
        if let Some((func, after)) = rest.split_once("' (") {
            // The file ends at the first `:LINE)` (a file name may hold `:` or `)` itself).
            for (i, _) in after.match_indices(')') {
                let Some((file, line)) = after[..i].rsplit_once(':') else { continue };
                if !file.is_empty() && !line.is_empty() && line.bytes().all(|b| b.is_ascii_digit()) {
                    return format!("function '{func}' ({}:{line}){}", name(file), &after[i + 1..]);
                }
            }
        }
        return step.to_string();
    }
    match step.split_once(" global ") {
        Some((file, key)) if root && (file.contains('/') || file.ends_with(".py")) => {
            format!("{} global {key}", name(file))
        }
        _ => step.to_string(),
    }
}

/// The line a person reads for a group.
fn line_text(h: &WalkedHolder, objects: u64, bytes: u64, one: Option<&str>) -> String {
    let (how, path) = (h.how.as_str(), h.path.as_slice());
    let what = match one {
        Some(desc) if objects == 1 => format!("{desc} ({})", fmt_bytes(bytes)),
        _ if objects == 1 => format!("1 object ({})", fmt_bytes(bytes)),
        _ => format!("{objects} objects ({})", fmt_bytes(bytes)),
    };
    match how {
        "cycle" => format!(
            "{}: the next cyclic collection frees {what}",
            path.first().map_or("unreachable reference cycle", String::as_str)
        ),
        "autograd" => {
            let graph = if h.graphs > 1 {
                format!("{} autograd graphs: {} nodes", thousands(h.graphs), thousands(h.graph_nodes))
            } else {
                let s = if h.graph_nodes == 1 { "" } else { "s" };
                format!("autograd graph: {} node{s}", thousands(h.graph_nodes))
            };
            format!(
                "saved by autograd for {}, reached from {} \u{2192} {graph} keeping {what}",
                h.saved_for.as_deref().unwrap_or("?"),
                path.join(" \u{2192} ")
            )
        }
        _ => format!("{} \u{2192} {what}", path.join(" \u{2192} ")),
    }
}

/// The stacks of `torch_stacks`, by index: `None` for an entry that is not a list of
/// `[file, line, function]` frames (a frame of another shape is left out).
fn block_stacks(v: &serde_json::Value) -> Vec<Option<Vec<BlockFrame>>> {
    let Some(list) = v.as_array() else { return Vec::new() };
    list.iter()
        .map(|stack| {
            let frames: Vec<BlockFrame> = stack
                .as_array()?
                .iter()
                .filter_map(|f| {
                    let f = f.as_array()?;
                    Some(BlockFrame {
                        file: f.first()?.as_str()?.to_string(),
                        line: u32::try_from(f.get(1)?.as_u64()?).ok()?,
                        function: f.get(2)?.as_str()?.to_string(),
                    })
                })
                .collect();
            (!frames.is_empty()).then_some(frames)
        })
        .collect()
}

/// The groups of `torch_blocks`: (segment address, blocks, bytes, stack index); a malformed
/// entry is left out.
fn block_groups(v: &serde_json::Value) -> Vec<(u64, u64, u64, usize)> {
    let Some(list) = v.as_array() else { return Vec::new() };
    list.iter()
        .filter_map(|g| {
            let g = g.as_array()?;
            let n = |i: usize| g.get(i).and_then(serde_json::Value::as_u64);
            Some((n(0)?, n(1)?, n(2)?, usize::try_from(n(3)?).ok()?))
        })
        .collect()
}

/// Attributes walk `h` to the live allocations of `state`; `py`: the stream's Python code
/// objects, which name the frames of PyTorch's block stacks.
pub fn attribute(h: &HeapWalk, state: &State, pid: u32, py: &crate::explain::pyframes::Python) -> Holders {
    let mut walked: Walked =
        if h.result.is_empty() { Walked::default() } else { serde_json::from_str(&h.result).unwrap_or_default() };
    for h in &mut walked.holders {
        for (i, step) in h.path.iter_mut().enumerate() {
            *step = named_step(step, i == 0, py);
        }
    }
    let status = status_name(h.status);
    let message = match h.status {
        WalkStatus::Complete => format!("walked {} Python objects", h.visited),
        WalkStatus::Cut => {
            format!("walk cut after {} (GPUSHIM_HEAP_WALK_MS)", crate::report::words::count(h.visited, "object"))
        }
        WalkStatus::Blocked => format!(
            "no walk: the main thread ran no Python code for {} (blocked in native code?)",
            crate::report::words::fmt_seconds(h.elapsed_ns as f64 / 1e9)
        ),
        WalkStatus::Failed => "no walk: the walker failed".to_string(),
        WalkStatus::Skipped => "no walk: another walk was waiting or running".to_string(),
    };
    // Live pointer allocations by address: (end, site).
    let mut by_addr: BTreeMap<u64, (u64, u32)> = BTreeMap::new();
    let mut site_live: BTreeMap<u32, u64> = BTreeMap::new();
    let mut handle_site: HashMap<u64, u32> = HashMap::new();
    for (&(handle, addr), e) in state.live() {
        *site_live.entry(e.site).or_default() += e.size;
        if handle {
            handle_site.insert(addr, e.site);
        } else {
            by_addr.insert(addr, (addr.saturating_add(e.size), e.site));
        }
    }
    // A VMM handle (`cuMemCreate`) has no address of its own: its memory is where it is
    // mapped, and an object there belongs to the handle's site (PyTorch's expandable
    // segments map 2 MiB or 20 MiB handles into one reserved range).
    for (addr, size, handle) in state.vmm.mappings() {
        if let Some(&site) = handle_site.get(&handle) {
            by_addr.entry(addr).or_insert((addr.saturating_add(size), site));
        }
    }
    // Per site (None: unattributed): objects with their allocation.
    let mut per: BTreeMap<Option<u32>, Vec<Placed>> = BTreeMap::new();
    for o in &walked.objects {
        let hit = by_addr.range(..=o.ptr).next_back().filter(|(_, &(end, _))| o.ptr < end);
        match hit {
            Some((&start, &(end, site))) => per.entry(Some(site)).or_default().push((o, Some((start, end)))),
            None => per.entry(None).or_default().push((o, None)),
        }
    }
    // PyTorch's own state: per site, the segments' total and allocated bytes.
    let mut torch_site: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
    for &[addr, total, allocated] in walked.torch_segments.as_deref().unwrap_or(&[]) {
        let hit = by_addr.range(..=addr).next_back().filter(|(_, &(end, _))| addr < end);
        if let Some((_, &(_, site))) = hit {
            let e = torch_site.entry(site).or_default();
            e.0 = e.0.saturating_add(total);
            e.1 = e.1.saturating_add(allocated);
        }
    }
    // PyTorch's blocks with a recorded stack: per site, per stack, the blocks and bytes.
    let stacks = block_stacks(&walked.torch_stacks);
    let mut block_site: BTreeMap<u32, BTreeMap<usize, (u64, u64)>> = BTreeMap::new();
    for (addr, n, bytes, stack) in block_groups(&walked.torch_blocks) {
        if stacks.get(stack).is_none_or(Option::is_none) {
            continue;
        }
        let hit = by_addr.range(..=addr).next_back().filter(|(_, &(end, _))| addr < end);
        if let Some((_, &(_, site))) = hit {
            let e = block_site.entry(site).or_default().entry(stack).or_default();
            e.0 = e.0.saturating_add(n);
            e.1 = e.1.saturating_add(bytes);
        }
    }
    // All of a site's stacks, most bytes first: the first TOP_BLOCK_STACKS are written.
    let blocks_of = |site: u32| -> Vec<BlockStack> {
        let mut v: Vec<(usize, u64, u64)> =
            block_site.get(&site).map(|m| m.iter().map(|(&i, &(n, b))| (i, n, b)).collect()).unwrap_or_default();
        v.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(&b.0)));
        v.into_iter()
            .filter_map(|(i, n, b)| Some(BlockStack { blocks: n, bytes: b, frames: stacks.get(i)?.as_ref()?.clone() }))
            .collect()
    };
    let found: Vec<crate::explain::kinds::Found> = walked
        .objects
        .iter()
        .map(|o| {
            let h = walked.holders.get(o.holder);
            crate::explain::kinds::Found {
                ptr: o.ptr,
                nbytes: o.nbytes,
                role: o.role.as_deref(),
                how: h.map_or("path", |h| h.how.as_str()),
                saved_for: h.and_then(|h| h.saved_for.as_deref()),
                stack: o.stack,
            }
        })
        .collect();
    let kinds =
        crate::explain::kinds::of_walk(&found, walked.torch_segments.as_deref().unwrap_or(&[]), &stacks, state, py);
    let holder_of = |o: &WalkedObject| walked.holders.get(o.holder);
    let build = |site: Option<u32>, objs: &[Placed]| -> SiteHolders {
        let live_bytes = site.and_then(|s| site_live.get(&s).copied()).unwrap_or(0);
        let mut groups: BTreeMap<usize, (u64, u64, &str)> = BTreeMap::new();
        let mut ranges: Vec<(u64, u64)> = Vec::new();
        let mut object_bytes = 0u64;
        for (o, alloc) in objs {
            object_bytes = object_bytes.saturating_add(o.nbytes);
            let g = groups.entry(o.holder).or_insert((0, 0, &o.desc));
            g.0 += 1;
            g.1 = g.1.saturating_add(o.nbytes);
            if let Some((s, e)) = alloc {
                let end = o.ptr.saturating_add(o.nbytes).min(*e);
                ranges.push((o.ptr.max(*s), end));
            }
        }
        ranges.sort_unstable();
        let (mut in_use, mut reach) = (0u64, 0u64);
        for (s, e) in ranges {
            let s = s.max(reach);
            if e > s {
                in_use += e - s;
                reach = e;
            }
        }
        let mut holders: Vec<HolderLine> = groups
            .iter()
            .map(|(&i, &(n, b, desc))| match walked.holders.get(i) {
                Some(h) => HolderLine {
                    how: h.how.clone(),
                    path: h.path.clone(),
                    saved_for: h.saved_for.clone(),
                    graphs: h.graphs,
                    graph_nodes: h.graph_nodes,
                    objects: n,
                    bytes: b,
                    text: line_text(h, n, b, Some(desc)),
                },
                None => HolderLine {
                    how: "path".to_string(),
                    objects: n,
                    bytes: b,
                    text: "holder unknown".to_string(),
                    ..HolderLine::default()
                },
            })
            .collect();
        holders.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(b.objects.cmp(&a.objects)));
        let mut top: Vec<&Placed> = objs.iter().collect();
        top.sort_by(|a, b| b.0.nbytes.cmp(&a.0.nbytes).then(a.0.ptr.cmp(&b.0.ptr)));
        let top_objects = top
            .into_iter()
            .take(TOP_OBJECTS)
            .map(|(o, _)| HeldObject {
                address: format!("{:#x}", o.ptr),
                bytes: o.nbytes,
                desc: o.desc.clone(),
                holder: holder_of(o).map_or(String::new(), |h| line_text(h, 1, o.nbytes, None)),
            })
            .collect();
        // PyTorch's allocator knows which blocks of its segments are allocated: its word wins
        // over the objects' extents for the sites its segments lie in.
        let (in_use, in_use_from) = match site.and_then(|s| torch_site.get(&s)) {
            Some(&(_, allocated)) => (allocated, "torch"),
            None => (in_use, "objects"),
        };
        let mut blocks = site.map(blocks_of).unwrap_or_default();
        let more_blocks = blocks.split_off(blocks.len().min(TOP_BLOCK_STACKS));
        SiteHolders {
            site,
            live_bytes,
            objects: objs.len() as u64,
            object_bytes,
            in_use_bytes: in_use,
            cached_bytes: live_bytes.saturating_sub(in_use),
            in_use_from: in_use_from.to_string(),
            holders,
            top_objects,
            blocks,
            more_blocks,
        }
    };
    let mut order: Vec<(u32, u64)> = site_live.iter().map(|(&s, &b)| (s, b)).collect();
    order.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let sites = order
        .into_iter()
        .take(MAX_SITES)
        .map(|(s, _)| build(Some(s), per.get(&Some(s)).map_or(&[][..], Vec::as_slice)))
        .collect();
    let unattributed = build(None, per.get(&None).map_or(&[][..], Vec::as_slice));
    Holders {
        schema: SCHEMA.to_string(),
        pid,
        reason: reason_name(h.reason).to_string(),
        number: (h.reason != WalkReason::Exit).then_some(h.number),
        walk: Walk {
            status: status.to_string(),
            elapsed_s: h.elapsed_ns as f64 / 1e9,
            objects_visited: h.visited,
            objects_found: walked.found,
            message,
            core: walked.core.clone(),
        },
        sites,
        unattributed,
        kinds,
    }
}

/// The companion file of report `report`: `X.json` → `X.holders.json`.
pub fn companion_of(report: &Path) -> PathBuf {
    beside(report, "holders")
}

/// A companion file of report `report` of kind `kind`: `X.json` → `X.<kind>.json`.
pub fn beside(report: &Path, kind: &str) -> PathBuf {
    let name = report.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let stem = name.strip_suffix(".json").unwrap_or(&name);
    report.with_file_name(format!("{stem}.{kind}.json"))
}

/// The companion file of report `report`, if there is one.
///
/// # Errors
/// If it exists but cannot be read or is malformed (the message names it).
pub fn read_beside(report: &Path) -> Result<Option<Holders>> {
    let c = companion_of(report);
    if !c.exists() {
        return Ok(None);
    }
    Holders::read(&c).map(Some).with_context(|| format!("cannot read holders file {}", c.display()))
}

/// A holder group's name without its counts: how `gpushim diff` matches groups of two walks.
pub fn holder_label(h: &HolderLine) -> String {
    let path = h.path.join(" \u{2192} ");
    match h.how.as_str() {
        "cycle" => h.path.first().cloned().unwrap_or_else(|| "unreachable reference cycle".to_string()),
        "autograd" => {
            format!("saved by autograd for {}, reached from {path}", h.saved_for.as_deref().unwrap_or("?"))
        }
        _ => path,
    }
}

/// Per holder group of a walk (all sites and the unattributed objects together), by
/// [`holder_label`]: (how, objects, bytes).
pub fn group_totals(h: &Holders) -> BTreeMap<String, (String, u64, u64)> {
    let mut out: BTreeMap<String, (String, u64, u64)> = BTreeMap::new();
    for s in h.sites.iter().chain(std::iter::once(&h.unattributed)) {
        for l in &s.holders {
            let e = out.entry(holder_label(l)).or_insert_with(|| (l.how.clone(), 0, 0));
            e.1 = e.1.saturating_add(l.objects);
            e.2 = e.2.saturating_add(l.bytes);
        }
    }
    out
}

/// The lines shown under a suspect or a site (without indentation): in use against live, then
/// the largest holder groups (at most `max`). `walk_status` is the walk's (`Holders::walk`):
/// after a walk that did not complete, live bytes no object was found holding are not said to
/// be held by none (the walk may have stopped before reaching their holders); an empty status
/// (a file without one) reads as complete.
pub fn site_lines(s: &SiteHolders, max: usize, walk_status: &str) -> Vec<String> {
    let first = if s.in_use_from == "torch" {
        format!(
            "PyTorch's allocator: {} of {} live in use, {} cached ({} in {})",
            fmt_bytes(s.in_use_bytes),
            fmt_bytes(s.live_bytes),
            fmt_bytes(s.cached_bytes),
            fmt_bytes(s.object_bytes),
            crate::report::words::count(s.objects, "object")
        )
    } else if !walk_status.is_empty() && walk_status != "complete" {
        format!(
            "Python objects found holding {} of {} live ({} in {}) before the heap walk stopped ({walk_status}): the rest's holders are not known",
            fmt_bytes(s.in_use_bytes),
            fmt_bytes(s.live_bytes),
            fmt_bytes(s.object_bytes),
            crate::report::words::count(s.objects, "object"),
        )
    } else if s.cached_bytes == 0 && s.in_use_bytes == s.live_bytes {
        format!(
            "Python objects hold all {} live ({}, {})",
            fmt_bytes(s.live_bytes),
            crate::report::words::count(s.objects, "object"),
            fmt_bytes(s.object_bytes),
        )
    } else {
        // The rest is free memory an allocator keeps for reuse, memory whose pointers the
        // program keeps as plain numbers (which the walk does not follow, the reachability scan
        // does), or memory nothing refers to any more: the walk cannot tell which.
        format!(
            "Python objects hold {} of {} live ({}, {}); {} held by no object the heap walk knows (an allocator's cache, pointers kept as numbers, or unreferenced: the reachability scan tells)",
            fmt_bytes(s.in_use_bytes),
            fmt_bytes(s.live_bytes),
            crate::report::words::count(s.objects, "object"),
            fmt_bytes(s.object_bytes),
            fmt_bytes(s.cached_bytes)
        )
    };
    let mut out = vec![first];
    for h in s.holders.iter().take(max) {
        out.push(format!("held by: {}", h.text));
    }
    if s.holders.len() > max {
        out.push(format!(
            "{} in the holders file",
            crate::report::words::count((s.holders.len() - max) as u64, "more holder")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::account::live::Op;
    use gpushim_testkit::alloc;
    use gpushim_wire::Event;

    fn state(allocs: &[(u64, u64, u32)]) -> State {
        let mut s = State::default();
        for (i, &(addr, size, site)) in allocs.iter().enumerate() {
            let Event::Alloc(a) = alloc(i as u64, i as u64, addr, size, site) else { unreachable!() };
            s.apply(&Op::Alloc(a));
        }
        s
    }

    fn walk(result: &str) -> HeapWalk {
        HeapWalk {
            reason: WalkReason::Snapshot,
            number: 3,
            status: WalkStatus::Complete,
            ts_ns: 0,
            elapsed_ns: 1_500_000,
            visited: 100,
            result: result.into(),
        }
    }

    /// PyTorch's expandable segments: two 2 MiB handles (sites 4 and 5) mapped side by side
    /// into one reserved range; a tensor in each mapping belongs to its handle's site.
    #[test]
    fn objects_in_mapped_vmm_memory_belong_to_the_handles_site() {
        use gpushim_wire::{Alloc, Api, Kind, Map};
        let mut s = State::default();
        let mib2 = 2 << 20;
        let va = 0x3_0000_0000u64;
        for (i, (handle, site)) in [(0x11u64, 4u32), (0x12, 5)].into_iter().enumerate() {
            let i = i as u64;
            s.apply(&Op::Alloc(Alloc {
                seq: 2 * i,
                ts_ns: 2 * i,
                addr: handle,
                size: mib2,
                kind: Kind::Device,
                api: Api::CuMemCreate,
                device: 0,
                stream: 0,
                tid: 1,
                stack: site,
                ctx: 0,
            }));
            s.apply(&Op::Map(Map {
                seq: 2 * i + 1,
                ts_ns: 2 * i + 1,
                addr: va + i * mib2,
                size: mib2,
                handle,
                tid: 1,
            }));
        }
        let r = format!(
            r#"{{"objects":[
            {{"ptr":{},"nbytes":1048576,"device":0,"type":"Tensor","desc":"Tensor(262144,) float32","holder":0}},
            {{"ptr":{},"nbytes":4096,"device":0,"type":"Tensor","desc":"Tensor(1024,) float32","holder":0}}],
            "holders":[{{"how":"path","path":["/w/t.py global 'features'","dict[*]"]}}],"found":2}}"#,
            va + 4096,
            va + mib2
        );
        let h = attribute(&walk(&r), &s, 42, &Default::default());
        let site = |id: u32| h.site(id).map(|x| (x.live_bytes, x.objects, x.in_use_bytes));
        assert_eq!(site(s.sites.keys().copied().min().unwrap()), Some((mib2, 1, 1 << 20)));
        assert_eq!(site(s.sites.keys().copied().max().unwrap()), Some((mib2, 1, 4096)));
        assert_eq!(h.unattributed.objects, 0);
    }

    /// Two views of the same 4 KiB inside a 16 KiB segment of site 1, a tensor in site 2 kept by
    /// a cycle, and an object whose memory is in no live allocation.
    #[test]
    fn objects_are_attributed_to_the_allocation_that_contains_them() {
        let s = state(&[(0x10000, 16384, 1), (0x40000, 8192, 2)]);
        let r = r#"{"objects":[
            {"ptr":65536,"nbytes":4096,"device":0,"type":"Tensor","desc":"Tensor(1024,) float32","holder":0},
            {"ptr":67584,"nbytes":2048,"device":0,"type":"Tensor","desc":"Tensor(512,) float32","holder":0},
            {"ptr":262144,"nbytes":8192,"device":0,"type":"Tensor","desc":"Tensor(2048,) float32","holder":1},
            {"ptr":4096,"nbytes":64,"device":0,"type":"Buf","desc":"Buf(16,) <f4","holder":0}],
            "holders":[{"how":"path","path":["/home/u/ws4/train.py global 'history'","list[*]"]},
                       {"how":"cycle","path":["unreachable reference cycle (Net)"]}],"found":4}"#;
        let h = attribute(&walk(r), &s, 42, &Default::default());
        assert_eq!((h.reason.as_str(), h.number, h.walk.status.as_str()), ("snapshot", Some(3), "complete"));
        let one = h.site(1).unwrap();
        assert_eq!((one.live_bytes, one.objects, one.object_bytes), (16384, 2, 6144));
        // The second view lies inside the first: 4 KiB in use, 12 KiB cached.
        assert_eq!((one.in_use_bytes, one.cached_bytes), (4096, 12288));
        assert_eq!(one.holders.len(), 1);
        // The script's file is shortened as a frame's is (`ws4/train.py:66`): one name for one file.
        assert_eq!(one.holders[0].text, "ws4/train.py global 'history' \u{2192} list[*] \u{2192} 2 objects (6.0 KiB)");
        assert_eq!(one.holders[0].path[0], "ws4/train.py global 'history'");
        assert_eq!(crate::report::words::short_path("/home/u/ws4/train.py"), "ws4/train.py");
        assert_eq!(one.top_objects[0].desc, "Tensor(1024,) float32");
        let two = h.site(2).unwrap();
        assert_eq!((two.in_use_bytes, two.cached_bytes), (8192, 0));
        assert_eq!(
            two.holders[0].text,
            "unreachable reference cycle (Net): the next cyclic collection frees Tensor(2048,) float32 (8.0 KiB)"
        );
        assert_eq!((h.unattributed.objects, h.unattributed.object_bytes), (1, 64));
        assert_eq!(h.sites.iter().map(|s| s.site).collect::<Vec<_>>(), [Some(1), Some(2)]);
    }

    /// One object is "1 object", not "1 objects", in a site's first line.
    /// A global's root and a frame's local name the script's file as its frames do, whether the
    /// walker had it absolute, with `..` (`python3 ../myleak2.py` from `proj/sub`) or relative.
    #[test]
    fn globals_and_locals_name_the_file_by_its_directory_and_its_name() {
        let mut py = crate::explain::pyframes::Python::default();
        py.set_cwd("/home/u/proj/sub");
        for file in ["/home/u/proj/myleak2.py", "/home/u/proj/sub/../myleak2.py", "../myleak2.py"] {
            assert_eq!(named_step(&format!("{file} global 'T'"), true, &py), "proj/myleak2.py global 'T'", "{file}");
            assert_eq!(
                named_step(&format!("function 'main' ({file}:57) local 'model' in thread 'MainThread'"), false, &py),
                "function 'main' (proj/myleak2.py:57) local 'model' in thread 'MainThread'",
                "{file}"
            );
        }
        assert_eq!(named_step("function 'f' (/a/b:c/x.py:3)", true, &py), "function 'f' (b:c/x.py:3)");
        assert_eq!(named_step("torch global 'x'", true, &py), "torch global 'x'", "a module without a file");
        assert_eq!(named_step("dict['a global b']", false, &py), "dict['a global b']");
        assert_eq!(named_step("list[*]", false, &py), "list[*]");
    }

    #[test]
    fn one_object_is_counted_in_the_singular() {
        let s = state(&[(0x10000, 16384, 1)]);
        let r = r#"{"objects":[{"ptr":65536,"nbytes":4096,"desc":"Buf(1024,) <f4","holder":0}],
            "holders":[{"how":"path","path":["m global 'x'"]}],"found":1}"#;
        let h = attribute(&walk(r), &s, 42, &Default::default());
        assert_eq!(
            site_lines(h.site(1).unwrap(), 3, "complete")[0],
            "Python objects hold 4.0 KiB of 16.0 KiB live (1 object, 4.0 KiB); 12.0 KiB held by no object the heap \
             walk knows (an allocator's cache, pointers kept as numbers, or unreferenced: the reachability scan tells)"
        );
        // A walk cut at its cap says what it found, not that the rest is held by nothing.
        assert_eq!(
            site_lines(h.site(1).unwrap(), 3, "cut")[0],
            "Python objects found holding 4.0 KiB of 16.0 KiB live (4.0 KiB in 1 object) before the heap walk \
             stopped (cut): the rest's holders are not known"
        );
        // All of it held: one short line, nothing said of what no object holds.
        let full = r#"{"objects":[{"ptr":65536,"nbytes":16384,"desc":"Buf(4096,) <f4","holder":0}],
            "holders":[{"how":"path","path":["m global 'x'"]}],"found":1}"#;
        let all = attribute(&walk(full), &s, 42, &Default::default());
        assert_eq!(
            site_lines(all.site(1).unwrap(), 3, "complete")[0],
            "Python objects hold all 16.0 KiB live (1 object, 16.0 KiB)"
        );
    }

    /// Tensors held from native code by the autograd graph of a tensor reachable from a root:
    /// one line naming the node they are saved for, the path to the graph's tensor and the
    /// graph's size.
    #[test]
    fn tensors_saved_by_autograd_name_the_graph_and_its_path() {
        let s = state(&[(0x100000, 4 << 20, 1)]);
        let r = r#"{"objects":[
            {"ptr":1048576,"nbytes":2097152,"desc":"Tensor(512, 1024) float32 grad_fn=AddmmBackward0","holder":0},
            {"ptr":3145728,"nbytes":2097152,"desc":"Tensor(512, 1024) float32 grad_fn=AddmmBackward0","holder":0}],
            "holders":[{"how":"autograd","path":["function 's1_aux_loss' (cases.py:155) local 'total_aux'",
                "Tensor() float32 grad_fn=AddBackward0"],"saved_for":"AbsBackward0","graphs":1,"graph_nodes":16004}],
            "found":2}"#;
        let h = attribute(&walk(r), &s, 42, &Default::default());
        let one = h.site(1).unwrap();
        assert_eq!((one.holders[0].graph_nodes, one.holders[0].saved_for.as_deref()), (16004, Some("AbsBackward0")));
        assert_eq!(
            one.holders[0].text,
            "saved by autograd for AbsBackward0, reached from function 's1_aux_loss' (cases.py:155) local \
             'total_aux' \u{2192} Tensor() float32 grad_fn=AddBackward0 \u{2192} autograd graph: 16,004 nodes keeping 2 \
             objects (4.0 MiB)"
        );
        assert_eq!((one.in_use_bytes, one.in_use_from.as_str()), (4 << 20, "objects"));
    }

    /// With PyTorch's segments in the result, a site's bytes in use are the allocated bytes of
    /// the segments inside its allocations, whatever the objects cover.
    #[test]
    fn in_use_comes_from_pytorchs_allocator_when_it_is_there() {
        let s = state(&[(0x200000, 20 << 20, 1), (0x2000000, 2 << 20, 2), (0x4000000, 1 << 20, 3)]);
        let r = r#"{"objects":[{"ptr":2097152,"nbytes":512,"desc":"Tensor(128,) float32","holder":0}],
            "holders":[{"how":"path","path":["m global 'x'"]}],"found":1,
            "torch_segments":[[2097152,20971520,1048576],[33554432,2097152,2097152]]}"#;
        let h = attribute(&walk(r), &s, 42, &Default::default());
        let by = |id| {
            let x = h.site(id).unwrap();
            (x.in_use_bytes, x.cached_bytes, x.in_use_from.clone())
        };
        assert_eq!(by(1), (1 << 20, 19 << 20, "torch".to_string()));
        assert_eq!(by(2), (2 << 20, 0, "torch".to_string()));
        // A site PyTorch's segments do not reach keeps the objects' word.
        assert_eq!(by(3), (0, 1 << 20, "objects".to_string()));
    }

    #[test]
    fn a_walk_without_result_says_why() {
        let s = state(&[(0x10000, 4096, 1)]);
        let mut w = walk("");
        w.status = WalkStatus::Blocked;
        w.elapsed_ns = 2_000_000_000;
        let h = attribute(&w, &s, 42, &Default::default());
        assert_eq!(h.walk.status, "blocked");
        assert!(h.walk.message.starts_with("no walk: the main thread ran no Python code for 2"), "{}", h.walk.message);
        assert_eq!((h.sites[0].live_bytes, h.sites[0].objects, h.sites[0].cached_bytes), (4096, 0, 4096));
        // Garbage in the result is treated as no result.
        let h = attribute(&walk("{not json"), &s, 42, &Default::default());
        assert_eq!(h.sites[0].objects, 0);
    }

    #[test]
    fn the_companion_file_sits_beside_its_report() {
        assert_eq!(
            companion_of(Path::new("/d/gpushim-7-snapshot-2.json")),
            Path::new("/d/gpushim-7-snapshot-2.holders.json")
        );
    }
}
