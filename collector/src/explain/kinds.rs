//! Device memory by kind: parameters, gradients, optimizer state, activations saved by
//! autograd, other tensors and arrays, PyTorch's allocated blocks no tensor was found in, the caching
//! allocator's free bytes, libraries' workspaces, traced memory no object was found in, and
//! untraced memory.
//!
//! Two steps. [`of_walk`], with each heap walk (`holders::attribute`): the objects found are
//! placed in the live allocations, and every byte they cover is given one tensor kind, the first
//! in the order of `report::KIND_NAMES` that an object covering it has ([`kind_of`]: the
//! walker's role of the object, else how it is held); PyTorch's segments give the bytes it
//! counts as allocated that no object covers, and its free bytes; the rest of the device's
//! traced bytes is `no_object`. [`complete`], with the report: the library owners' live bytes
//! (`gpu_memory[].owners`) are taken out of `no_object` as workspaces, and the driver's untraced
//! bytes added, so that the kinds add up to the traced bytes, and with the driver's figure to it.

use std::collections::BTreeMap;

use gpushim_wire::Kind;

use crate::account::live::State;
use crate::explain::frames::headline;
use crate::explain::pyframes::Python;
use crate::report::words::{first_user_frame, frame_label};
use crate::report::{BlockFrame, DeviceKinds, GpuMemory, KindBytes, KindLine, Site, KIND_NAMES};

/// Most lines listed per kind.
pub const TOP_LINES: usize = 5;
/// The tensor kinds: the first five of `KIND_NAMES`.
const TENSOR_KINDS: usize = 5;
/// Owners whose memory is a library's own workspace or state (the names of `owners::RULES`);
/// an owner named inside another's memory (`PyTorch caching allocator (cuBLAS workspace)`)
/// lies in that pool and is not one.
pub const LIBRARY_OWNERS: &[&str] = &["cuBLAS workspace", "cuBLAS", "cuDNN", "NCCL", "cuFFT plans"];

/// An object found by a heap walk, as far as its kind needs.
#[derive(Clone, Copy, Debug)]
pub struct Found<'a> {
    /// Start of its memory.
    pub ptr: u64,
    /// Its extent.
    pub nbytes: u64,
    /// The walker's role (`parameter`, `grad`, `optimizer_state`), if it told one.
    pub role: Option<&'a str>,
    /// How it is held (`path`, `native`, `autograd`, `cycle`).
    pub how: &'a str,
    /// For `autograd`: the node it is saved for.
    pub saved_for: Option<&'a str>,
    /// The index of the Python stack PyTorch recorded for the block it starts in, if any.
    pub stack: Option<usize>,
}

/// The tensor kind of an object (an index of `KIND_NAMES`): its role when the walker told one;
/// else saved by autograd when a graph keeps it for a node's backward (not a leaf the graph's
/// `AccumulateGrad` keeps: that is no activation); else other tensors and arrays. Nothing is guessed from
/// names or shapes.
pub fn kind_of(role: Option<&str>, how: &str, saved_for: Option<&str>) -> usize {
    match role {
        Some("parameter") => 0,
        Some("grad") => 1,
        Some("optimizer_state") => 2,
        _ if how == "autograd" && saved_for.is_some_and(|s| s != "AccumulateGrad") => 3,
        _ => 4,
    }
}

/// Marks `[a, b)` covered in `covered` (disjoint `start -> end` ranges) and returns how many
/// of its bytes were not covered before.
fn claim(covered: &mut BTreeMap<u64, u64>, a: u64, b: u64) -> u64 {
    if b <= a {
        return 0;
    }
    let (mut lo, mut hi) = (a, b);
    let mut old = 0u64;
    // Ranges that overlap or touch [a, b): the one starting at or before a, and those inside.
    let first = covered.range(..=a).next_back().filter(|(_, &e)| e >= a).map(|(&s, _)| s);
    let starts: Vec<u64> = first.into_iter().chain(covered.range(a..=b).map(|(&s, _)| s)).collect();
    for s in starts {
        if let Some(e) = covered.remove(&s) {
            old += e.min(b).saturating_sub(s.max(a));
            lo = lo.min(s);
            hi = hi.max(e);
        }
    }
    covered.insert(lo, hi);
    (b - a) - old
}

/// The line of a block's recorded stack: its headline when it has a user frame.
fn stack_line(frames: &[BlockFrame], py: &Python) -> Option<String> {
    let frames: Vec<crate::report::Frame> =
        frames.iter().map(|f| py.block_frame(&f.file, f.line, &f.function)).collect();
    headline(&frames, None).filter(|h| h.key.starts_with("user ")).map(|h| h.text)
}

/// Per device, a kind's bytes, objects and lines (by line text or site).
type Tally = BTreeMap<i32, Vec<(u64, u64, BTreeMap<(String, Option<u32>), (u64, u64)>)>>;

/// The kinds of the traced memory of each device from a walk's objects, PyTorch's segments
/// (`[address, total, allocated]`) and block stacks (their frames named by `py`'s code objects),
/// placed in the live allocations of `state`.
pub fn of_walk(
    objects: &[Found<'_>],
    segments: &[[u64; 3]],
    stacks: &[Option<Vec<BlockFrame>>],
    state: &State,
    py: &Python,
) -> Vec<DeviceKinds> {
    let mut traced: BTreeMap<i32, u64> = BTreeMap::new();
    // Live device and managed pointer allocations by address: (end, site, device).
    let mut by_addr: BTreeMap<u64, (u64, u32, i32)> = BTreeMap::new();
    for (&(handle, addr), e) in state.live() {
        if e.kind == Kind::PinnedHost {
            continue;
        }
        *traced.entry(e.device).or_default() += e.size;
        if !handle {
            by_addr.insert(addr, (addr.saturating_add(e.size), e.site, e.device));
        }
    }
    let place = |p: u64| by_addr.range(..=p).next_back().filter(|(_, &(end, _, _))| p < end).map(|(&s, &v)| (s, v));
    let segs: BTreeMap<u64, (u64, u64)> = segments.iter().map(|&[a, t, u]| (a, (a.saturating_add(t), u))).collect();
    let mut seg_tensor: BTreeMap<u64, u64> = BTreeMap::new();
    let mut lines_of: BTreeMap<usize, Option<String>> = BTreeMap::new();
    let mut order: Vec<(usize, &Found)> = objects.iter().map(|o| (kind_of(o.role, o.how, o.saved_for), o)).collect();
    order.sort_by_key(|(k, o)| (*k, o.ptr));
    let mut covered: BTreeMap<u64, u64> = BTreeMap::new();
    let mut tally: Tally = BTreeMap::new();
    for (k, o) in order {
        let Some((start, (end, site, device))) = place(o.ptr) else { continue };
        let (a, b) = (o.ptr.max(start), o.ptr.saturating_add(o.nbytes).min(end));
        let new = claim(&mut covered, a, b);
        if let Some((&s, _)) = segs.range(..=o.ptr).next_back().filter(|(_, &(e, _))| o.ptr < e) {
            *seg_tensor.entry(s).or_default() += new;
        }
        let line = o.stack.and_then(|i| {
            lines_of.entry(i).or_insert_with(|| stacks.get(i)?.as_ref().and_then(|f| stack_line(f, py))).clone()
        });
        let key = match line {
            Some(l) => (l, None),
            None => (String::new(), Some(site)),
        };
        let dev = tally.entry(device).or_insert_with(|| vec![(0, 0, BTreeMap::new()); TENSOR_KINDS]);
        let e = &mut dev[k];
        e.0 += new;
        e.1 += 1;
        let l = e.2.entry(key).or_default();
        l.0 += new;
        l.1 += 1;
    }
    // PyTorch's segments: free bytes, and allocated bytes no object covers.
    let (mut free, mut no_tensor): (BTreeMap<i32, u64>, BTreeMap<i32, u64>) = Default::default();
    for (&s, &(e, allocated)) in &segs {
        let Some((_, (_, _, device))) = place(s) else { continue };
        *free.entry(device).or_default() += (e - s).saturating_sub(allocated);
        *no_tensor.entry(device).or_default() += allocated.saturating_sub(seg_tensor.get(&s).copied().unwrap_or(0));
    }
    traced
        .into_iter()
        .filter(|(d, _)| *d >= 0)
        .map(|(ordinal, traced_bytes)| {
            let dev = tally.remove(&ordinal).unwrap_or_else(|| vec![(0, 0, BTreeMap::new()); TENSOR_KINDS]);
            let mut kinds: Vec<KindBytes> = dev
                .into_iter()
                .enumerate()
                .map(|(k, (bytes, objects, lines))| {
                    let mut lines: Vec<KindLine> = lines
                        .into_iter()
                        .map(|((line, site), (bytes, objects))| KindLine { line, site, bytes, objects })
                        .collect();
                    lines.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(b.objects.cmp(&a.objects)));
                    lines.truncate(TOP_LINES);
                    KindBytes { kind: KIND_NAMES[k].0.to_string(), owner: None, bytes, objects, lines }
                })
                .collect();
            let tensor_bytes: u64 = kinds.iter().map(|k| k.bytes).sum();
            let (nt, fr) = (no_tensor.get(&ordinal).copied().unwrap_or(0), free.get(&ordinal).copied().unwrap_or(0));
            let rest = traced_bytes.saturating_sub(tensor_bytes).saturating_sub(nt).saturating_sub(fr);
            for (name, bytes) in [("allocated_no_tensor", nt), ("cached_free", fr), ("no_object", rest)] {
                if bytes > 0 {
                    kinds.push(KindBytes { kind: name.to_string(), bytes, ..KindBytes::default() });
                }
            }
            DeviceKinds { ordinal, traced_bytes, tensor_bytes, driver_bytes: None, kinds }
        })
        .collect()
}

/// The kinds of a walk (`walked`, from [`of_walk`]) completed with the report's `gpu_memory`:
/// each library owner's live bytes on the device as a `workspace` (out of `no_object`, as far
/// as it goes), the driver's untraced bytes when known; and each line that is a site's named
/// by the site's first user frame in `sites`.
pub fn complete(walked: &[DeviceKinds], gpu_memory: &[GpuMemory], sites: &[Site]) -> Vec<DeviceKinds> {
    walked
        .iter()
        .map(|d| {
            let mut d = d.clone();
            for k in &mut d.kinds {
                for l in &mut k.lines {
                    if let Some(id) = l.site.filter(|_| l.line.is_empty()) {
                        l.line = sites
                            .iter()
                            .find(|s| s.id == id)
                            .and_then(first_user_frame)
                            .map_or_else(|| format!("site {id}"), frame_label);
                    }
                }
            }
            let Some(g) = gpu_memory.iter().find(|g| g.ordinal == d.ordinal) else { return d };
            let rest_at = d.kinds.iter().position(|k| k.kind == "no_object");
            let mut rest = rest_at.map_or(0, |i| d.kinds[i].bytes);
            let mut libs = Vec::new();
            for o in g.owners.iter().filter(|o| LIBRARY_OWNERS.contains(&o.owner.as_str())) {
                let bytes = o.live_bytes.min(rest);
                rest -= bytes;
                if bytes > 0 {
                    libs.push(KindBytes {
                        kind: "workspace".to_string(),
                        owner: Some(o.owner.clone()),
                        bytes,
                        ..KindBytes::default()
                    });
                }
            }
            if let Some(i) = rest_at {
                d.kinds.remove(i);
            }
            d.kinds.extend(libs);
            if rest > 0 {
                d.kinds.push(KindBytes { kind: "no_object".to_string(), bytes: rest, ..KindBytes::default() });
            }
            if let (Some(u), Some(drv)) = (g.untraced_bytes, g.driver_bytes) {
                d.driver_bytes = Some(drv);
                if u > 0 {
                    d.kinds.push(KindBytes { kind: "untraced".to_string(), bytes: u, ..KindBytes::default() });
                }
            }
            d
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::account::live::Op;
    use crate::report::OwnerBytes;
    use gpushim_testkit::alloc_on;
    use gpushim_wire::Event;

    const MIB: u64 = 1 << 20;
    const KIB: u64 = 1 << 10;

    fn state(allocs: &[(u64, u64, Kind, i32, u32)]) -> State {
        let mut s = State::default();
        for (i, &(addr, size, kind, device, site)) in allocs.iter().enumerate() {
            let Event::Alloc(a) = alloc_on(i as u64, i as u64, addr, size, kind, device, site) else { unreachable!() };
            s.apply(&Op::Alloc(a));
        }
        s
    }

    fn found(ptr: u64, nbytes: u64, role: Option<&'static str>, how: &'static str) -> Found<'static> {
        Found { ptr, nbytes, role, how, saved_for: None, stack: None }
    }

    fn bytes(d: &DeviceKinds) -> Vec<(String, u64)> {
        d.kinds.iter().map(|k| (k.words(), k.bytes)).collect()
    }

    #[test]
    fn a_tensors_kind_is_its_role_else_how_autograd_holds_it_else_other() {
        let name = |role, how, saved_for| KIND_NAMES[kind_of(role, how, saved_for)].0;
        assert_eq!(name(Some("parameter"), "path", None), "parameters");
        // A parameter a graph keeps through AccumulateGrad is still a parameter.
        assert_eq!(name(Some("parameter"), "autograd", Some("AccumulateGrad")), "parameters");
        assert_eq!(name(Some("grad"), "path", None), "gradients");
        assert_eq!(name(Some("optimizer_state"), "path", None), "optimizer_state");
        assert_eq!(name(None, "autograd", Some("MulBackward0")), "activations");
        // A leaf the graph only accumulates into is no activation; nor is a tensor held from
        // native code with no graph, or an unknown role.
        assert_eq!(name(None, "autograd", Some("AccumulateGrad")), "other_tensors");
        assert_eq!(name(None, "native", None), "other_tensors");
        assert_eq!(name(Some("weights?"), "path", None), "other_tensors");
        assert_eq!(name(None, "path", None), "other_tensors");
    }

    #[test]
    fn claimed_ranges_count_each_byte_once() {
        let mut c = BTreeMap::new();
        assert_eq!(claim(&mut c, 100, 200), 100);
        assert_eq!(claim(&mut c, 150, 250), 50);
        assert_eq!(claim(&mut c, 0, 100), 100);
        assert_eq!(claim(&mut c, 50, 240), 0);
        assert_eq!(claim(&mut c, 300, 400), 100);
        assert_eq!(claim(&mut c, 0, 500), 150);
        assert_eq!(c.into_iter().collect::<Vec<_>>(), [(0, 500)]);
    }

    /// A PyTorch segment of 8 MiB (6 MiB allocated) holding a parameter, a view of it, its
    /// gradient, two optimizer state tensors and an activation; a cuBLAS workspace on its own
    /// allocation; a buffer on GPU 1. Each byte has one kind, and the kinds add up to the
    /// traced bytes, and with the untraced bytes to the driver's figure.
    #[test]
    fn the_kinds_add_up_to_the_traced_bytes_and_the_drivers_figure() {
        let s = state(&[
            (0x100_0000, 8 * MIB, Kind::Device, 0, 1),
            (0x200_0000, MIB, Kind::Device, 0, 2),
            (0x300_0000, 64 * KIB, Kind::PinnedHost, -1, 3),
            (0x400_0000, 256 * KIB, Kind::Device, 1, 4),
        ]);
        let mut act = found(0x160_0000, 512 * KIB, None, "autograd");
        act.saved_for = Some("MulBackward0");
        let objects = [
            // A view of the parameter, met first: its bytes are the parameter's.
            found(0x100_0000, MIB, None, "path"),
            found(0x100_0000, 2 * MIB, Some("parameter"), "path"),
            found(0x120_0000, MIB, Some("grad"), "path"),
            found(0x130_0000, MIB, Some("optimizer_state"), "path"),
            found(0x140_0000, MIB, Some("optimizer_state"), "path"),
            act,
            found(0x400_0000, 256 * KIB, None, "path"),
            // In no live allocation: in no kind.
            found(0x900_0000, MIB, None, "path"),
        ];
        let walked = of_walk(&objects, &[[0x100_0000, 8 * MIB, 6 * MIB]], &[], &s, &Python::default());
        assert_eq!(walked.iter().map(|d| d.ordinal).collect::<Vec<_>>(), [0, 1]);
        let g0 = &walked[0];
        assert_eq!((g0.traced_bytes, g0.tensor_bytes), (9 * MIB, 5 * MIB + 512 * KIB));
        let w = |s: &str| s.to_string();
        assert_eq!(
            bytes(g0),
            [
                (w("parameters"), 2 * MIB),
                (w("gradients"), MIB),
                (w("optimizer state"), 2 * MIB),
                (w("activations saved by autograd"), 512 * KIB),
                (w("other tensors and arrays"), 0),
                (w("allocated, no tensor found"), 512 * KIB),
                (w("cached free"), 2 * MIB),
                (w("no object found"), MIB),
            ]
        );
        assert_eq!(g0.kinds.iter().map(|k| k.bytes).sum::<u64>(), g0.traced_bytes);
        // The view counts as an object of the other tensors and arrays, with no bytes of its own.
        assert_eq!((g0.kinds[4].objects, g0.kinds[2].objects), (1, 2));
        assert_eq!(g0.kinds[0].lines, [KindLine { line: String::new(), site: Some(1), bytes: 2 * MIB, objects: 1 }]);
        assert_eq!(bytes(&walked[1])[4], (w("other tensors and arrays"), 256 * KIB));

        let gpu = GpuMemory {
            ordinal: 0,
            owners: vec![
                OwnerBytes { owner: "PyTorch caching allocator".into(), live_bytes: 8 * MIB, live_count: 1 },
                OwnerBytes { owner: "cuBLAS".into(), live_bytes: MIB, live_count: 1 },
            ],
            traced_bytes: 9 * MIB,
            driver_bytes: Some(509 * MIB),
            untraced_bytes: Some(500 * MIB),
            ..GpuMemory::default()
        };
        let site = Site {
            id: 1,
            frames: vec![crate::report::Frame {
                function: "train".into(),
                file: Some("/w/proj/train.py".into()),
                line: Some(12),
                ..Default::default()
            }],
            ..Site::default()
        };
        let done = complete(&walked, &[gpu], &[site]);
        let g0 = &done[0];
        assert_eq!(
            &bytes(g0)[5..],
            [
                (w("allocated, no tensor found"), 512 * KIB),
                (w("cached free"), 2 * MIB),
                (w("cuBLAS"), MIB),
                (w("untraced"), 500 * MIB)
            ]
        );
        assert_eq!(g0.kinds.iter().map(|k| k.bytes).sum::<u64>(), 509 * MIB);
        assert_eq!(g0.driver_bytes, Some(509 * MIB));
        assert_eq!(g0.kinds[0].lines[0].line, "train (proj/train.py:12)");
        // No gpu_memory entry for GPU 1: its kinds stay the walk's; a site the report does not
        // list is named by its number.
        assert_eq!(bytes(&done[1]), bytes(&walked[1]));
        assert_eq!(done[1].kinds[4].lines[0].line, "site 4");
    }

    /// A tensor's line is the user frame of the stack PyTorch recorded for its block.
    #[test]
    fn lines_come_from_the_blocks_recorded_stack() {
        let s = state(&[(0x100_0000, 4 * MIB, Kind::Device, 0, 1)]);
        let stack = vec![BlockFrame { file: "/w/proj/model.py".into(), line: 30, function: "forward".into() }];
        let mut a = found(0x100_0000, MIB, Some("parameter"), "path");
        a.stack = Some(0);
        let mut b = found(0x110_0000, MIB, Some("parameter"), "path");
        b.stack = Some(0);
        let walked = of_walk(&[a, b], &[], &[Some(stack)], &s, &Python::default());
        let l = &walked[0].kinds[0].lines;
        assert_eq!(l.len(), 1, "{l:?}");
        assert_eq!(
            (l[0].line.as_str(), l[0].site, l[0].bytes, l[0].objects),
            ("forward (proj/model.py:30)", None, 2 * MIB, 2)
        );
    }
}
