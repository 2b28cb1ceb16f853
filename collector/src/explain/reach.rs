//! Reachability: the shim's scan of the program's memory (a `Reach` event, shim/src/reach/)
//! matched with the live set: which live allocations are definitely lost (no pointer to them is
//! left in the program's memory), indirectly lost (pointed to only from host blocks that are
//! themselves unreachable), or reachable, per site and in total.
//!
//! Allocations made by a framework's caching allocator (PyTorch's `CUDACachingAllocator`,
//! CuPy's memory pool, XLA's BFC allocator, told by their site's frames) are summed in one line
//! each, "reachable by the framework's allocator": the allocator keeps a pointer to every
//! segment, and who holds a tensor is the heap walk's question (holders.rs).
//!
//! Sites with definitely-lost allocations become leak suspects ranked above the growth-only
//! ones, with the reason "N of M allocations definitely lost (no pointer left)".

use std::collections::{BTreeMap, HashMap};

use gpushim_wire::{Reach, ReachClass, ReachRegion, ReachStatus};
use serde::{Deserialize, Serialize};

use crate::account::live::State;
use crate::explain::symbolize::Symbolizer;
use crate::report::words::{count, fmt_bytes};
use crate::report::{Frame, FrameworkHeld, Held, Reachability, Report, SiteReach};

/// How many of the most referenced reachable allocations are listed with where they are held.
pub const MOST_REFERENCED: usize = 10;

/// The companion file of a snapshot or out-of-memory report (`…-snapshot-N.reach.json`): the
/// scan's result and its per-site counts.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ReachFile {
    /// The scan's result.
    pub reachability: Reachability,
    /// Per site id.
    pub sites: BTreeMap<u32, SiteReach>,
}

/// The framework allocator a site's frames belong to, if any.
pub fn framework_of(frames: &[Frame]) -> Option<&'static str> {
    for f in frames {
        let s = f.function.as_str();
        if s.contains("CUDACachingAllocator") || s.contains("c10::cuda::") && s.contains("Allocator") {
            return Some("PyTorch CUDACachingAllocator");
        }
        let module = f.module_name();
        if module.starts_with("libc10_cuda") {
            // PyTorch's allocators live in libc10_cuda.so (whose internal symbols may be absent).
            return Some("PyTorch CUDACachingAllocator");
        }
        if s.contains("BFCAllocator") {
            return Some("XLA BFC allocator");
        }
        if module.starts_with("xla_extension") || module.starts_with("libjax") || f.module.contains("/jaxlib/") {
            return Some("XLA allocator");
        }
        let file = f.file.as_deref().unwrap_or("");
        if s.contains("cupy")
            && (s.contains("memory") || s.contains("MemoryPool") || s.contains("SingleDeviceMemoryPool"))
            || f.python && file.contains("cupy") && (file.contains("memory") || s.contains("MemoryPool"))
            || f.module.contains("cupy") && f.module.contains("memory")
        {
            return Some("CuPy memory pool");
        }
    }
    None
}

/// Matches `scan` with the live set of `state`: the whole result and per-site counts.
/// `stacks` and `sym` give the frames that tell framework allocators.
pub fn classify(scan: &Reach, state: &State, stacks: &HashMap<u32, Vec<u64>>, sym: &mut Symbolizer) -> ReachFile {
    let by_addr: HashMap<u64, &gpushim_wire::ReachEntry> = scan.entries.iter().map(|e| (e.addr, e)).collect();
    let mut r = Reachability {
        status: match scan.status {
            ReachStatus::Complete => "complete",
            ReachStatus::Cut => "cut",
            ReachStatus::Failed => "failed",
        }
        .into(),
        elapsed_ms: scan.elapsed_ns as f64 / 1e6,
        scanned_bytes: scan.scanned_bytes,
        unreadable_bytes: scan.unreadable_bytes,
        bytes_per_s: if scan.elapsed_ns > 0 { scan.scanned_bytes as f64 / (scan.elapsed_ns as f64 / 1e9) } else { 0.0 },
        cpu_ms: scan.cpu_ns as f64 / 1e6,
        bytes_per_cpu_s: if scan.cpu_ns > 0 { scan.scanned_bytes as f64 / (scan.cpu_ns as f64 / 1e9) } else { 0.0 },
        note: (!scan.note.is_empty()).then(|| scan.note.clone()),
        ..Reachability::default()
    };
    let mut sites: BTreeMap<u32, SiteReach> = BTreeMap::new();
    // Per site: the framework allocator holding it, and whether a library made it for its own
    // state (`owners::Owner::library`).
    let mut kinds: HashMap<u32, (Option<&'static str>, bool)> = HashMap::new();
    let mut library_capped = 0u64;
    let mut fw: BTreeMap<&'static str, (u64, u64)> = BTreeMap::new();
    // (site, size, the scan's entry) of each reachable allocation.
    let mut held: Vec<(u32, u64, &gpushim_wire::ReachEntry)> = Vec::new();
    for (&(handle, addr), e) in state.live() {
        let Some(x) = by_addr.get(&addr).filter(|_| !handle) else {
            r.unknown_count += 1;
            r.unknown_bytes += e.size;
            continue;
        };
        // One symbolization per site: the allocator that holds it and whether it is a
        // library's own state.
        let (framework, library) = *kinds.entry(e.site).or_insert_with(|| {
            let frames = stacks.get(&e.site).map(|a| sym.stack_of(e.site, a)).unwrap_or_default();
            (framework_of(&frames), crate::explain::owners::owner_of(&frames).library())
        });
        let s = sites.entry(e.site).or_default();
        if let Some(name) = framework {
            s.framework = Some(name.to_string());
            let f = fw.entry(name).or_default();
            f.0 += 1;
            f.1 += e.size;
            continue;
        }
        // A library's own state (a cuBLAS handle's workspaces) is at most possibly lost: the
        // library keeps its pointers in the handle, parts of which lie where the scan does not
        // read (device memory, the driver's mappings); memory left out of the scan never makes
        // "definitely lost" (issue 29: 2 or 3 per PyTorch run, while the handle was alive).
        let class = match x.class {
            ReachClass::Lost | ReachClass::IndirectlyLost if library => {
                library_capped += 1;
                ReachClass::PossiblyLost
            }
            c => c,
        };
        match class {
            ReachClass::Lost => {
                s.definitely_lost_count += 1;
                s.definitely_lost_bytes += e.size;
                r.definitely_lost_count += 1;
                r.definitely_lost_bytes += e.size;
            }
            ReachClass::IndirectlyLost => {
                s.indirectly_lost_count += 1;
                s.indirectly_lost_bytes += e.size;
                r.indirectly_lost_count += 1;
                r.indirectly_lost_bytes += e.size;
            }
            ReachClass::PossiblyLost => {
                s.possibly_lost_count += 1;
                s.possibly_lost_bytes += e.size;
                r.possibly_lost_count += 1;
                r.possibly_lost_bytes += e.size;
            }
            ReachClass::Reachable => {
                s.reachable_count += 1;
                r.reachable_count += 1;
                r.reachable_bytes += e.size;
                if x.interior {
                    s.interior_count += 1;
                    r.interior_count += 1;
                }
                held.push((e.site, e.size, x));
            }
            ReachClass::Unknown => {
                r.unknown_count += 1;
                r.unknown_bytes += e.size;
                continue;
            }
        }
        s.scanned_count += 1;
    }
    if library_capped > 0 {
        let why = format!(
            "{} a library made for its own state (a cuBLAS handle's workspaces) said possibly lost, never definitely: \
             the library keeps their pointers in its handle, parts of which lie where the scan does not read \
             (device memory, the driver's mappings)",
            crate::report::words::count(library_capped, "allocation")
        );
        r.note = Some(match r.note.take() {
            Some(n) => format!("{n}; {why}"),
            None => why,
        });
    }
    r.framework_held = fw
        .into_iter()
        .map(|(name, (count, bytes))| FrameworkHeld { allocator: name.to_string(), count, bytes })
        .collect();
    held.sort_by(|a, b| b.2.refs.cmp(&a.2.refs).then(a.2.addr.cmp(&b.2.addr)));
    r.most_referenced = held
        .into_iter()
        .take(MOST_REFERENCED)
        .map(|(site, size, x)| Held {
            address: format!("{:#x}", x.addr),
            size,
            site,
            refs: x.refs,
            interior: x.interior,
            from: where_held(x.region, x.tid, x.from, sym),
        })
        .collect();
    ReachFile { reachability: r, sites }
}

/// Words for where a reference was found.
fn where_held(region: ReachRegion, tid: u32, from: u64, sym: &mut Symbolizer) -> String {
    match region {
        ReachRegion::Data => {
            // The symbolizer looks up return addresses (one byte back): pass the byte after.
            let f = sym.stack(&[from + 1]);
            match f.first() {
                Some(f) if f.function != "??" => format!("data of {} ({})", f.module_name(), f.function),
                Some(f) if !f.module.is_empty() => format!("data of {}", f.module_name()),
                _ => format!("data at {from:#x}"),
            }
        }
        ReachRegion::Heap => "heap".into(),
        ReachRegion::Stack => format!("stack of thread {tid}"),
        ReachRegion::Anon => "anonymous memory".into(),
        ReachRegion::None => String::new(),
    }
}

/// Puts `file` into the final report: each site's counts, the whole result, and the suspects
/// (sites with definitely-lost allocations first, their reason leading with
/// "N of M allocations definitely lost (no pointer left)").
pub fn apply(report: &mut Report, file: ReachFile) {
    for site in &mut report.sites {
        if let Some(s) = file.sites.get(&site.id) {
            site.reach = Some(s.clone());
        }
    }
    // Only the growth suspects are re-ranked: a site is not made a suspect by its lost
    // allocations alone (the summary's lead line and its `reach` counts say them), so that the
    // suspects' meaning (and `--fail-on-leak`) stays that of rank.rs. A suspect of several sites
    // (one cause) counts over all of them.
    //
    // A suspect of one line's sites (`line_sites`: a union that grew as a whole) is not moved up
    // by its members' lost allocations: the lost ones of one site (a library's workspace made
    // at the line's first call) would otherwise make the whole line's growth the top suspect.
    // Its reason still says them.
    for x in &mut report.suspects {
        let members: Vec<u32> = if x.sites.is_empty() { vec![x.site] } else { x.sites.clone() };
        let (mut lost, mut lost_bytes, mut scanned, mut possibly) = (0u64, 0u64, 0u64, 0u64);
        let (mut lost_in, mut possibly_in, mut indirect_in) = (Vec::new(), Vec::new(), Vec::new());
        let mut indirect = 0u64;
        for (id, s) in members.iter().filter_map(|id| Some((*id, file.sites.get(id)?))) {
            lost += s.definitely_lost_count;
            indirect += s.indirectly_lost_count;
            if s.indirectly_lost_count > 0 {
                indirect_in.push(id);
            }
            lost_bytes = lost_bytes.saturating_add(s.definitely_lost_bytes);
            scanned += s.scanned_count;
            possibly += s.possibly_lost_count;
            if s.definitely_lost_count > 0 {
                lost_in.push(id);
            }
            if s.possibly_lost_count > 0 {
                possibly_in.push(id);
            }
        }
        // In a suspect of several sites, which of them hold the lost ones, when not all do.
        let which = |ids: &[u32]| -> String {
            if ids.len() == members.len() {
                return String::new();
            }
            let names: Vec<String> = ids.iter().map(|id| id.to_string()).collect();
            format!("; in site{} {}", if ids.len() == 1 { "" } else { "s" }, names.join(", "))
        };
        if possibly > 0 {
            x.reason = format!(
                "{possibly} of {} possibly lost (a pointer left only in memory the scan cannot \
                 trust{}); {}",
                count(scanned, "allocation"),
                which(&possibly_in),
                x.reason
            );
        }
        if indirect > 0 {
            x.reason = format!(
                "{indirect} of {} indirectly lost (pointed to only from lost memory{}); {}",
                count(scanned, "allocation"),
                which(&indirect_in),
                x.reason
            );
        }
        if lost == 0 {
            continue;
        }
        x.reason = format!(
            "{lost} of {} definitely lost (no pointer left{}); {}",
            count(scanned, "allocation"),
            which(&lost_in),
            x.reason
        );
        x.definitely_lost_count = lost;
        x.definitely_lost_bytes = lost_bytes;
    }
    // Stable: growth-only suspects keep their order below the definitely-lost ones.
    report.suspects.sort_by_key(|s| std::cmp::Reverse(crate::account::rank::lost_rank(s)));
    report.reachability = Some(file.reachability);
}

/// The summary's lead line when anything is definitely lost, e.g. `definitely lost: 4.0 MiB in
/// 4 allocations (no pointer left in the program's memory)`.
pub fn lead_line(r: &Reachability) -> Option<String> {
    if r.definitely_lost_count == 0 {
        return None;
    }
    Some(format!(
        "definitely lost: {} in {} allocation{} (no pointer left in the program's memory)",
        fmt_bytes(r.definitely_lost_bytes),
        r.definitely_lost_count,
        if r.definitely_lost_count == 1 { "" } else { "s" }
    ))
}

/// Whether a snapshot's or out-of-memory report's scan is worth a line on stderr (the one naming
/// its `*.reach.json`): it found something lost, framework allocators' segments, or did not
/// complete. The final report's summary has the scan's line whenever there was a scan
/// (`render::text::scan_lines`).
pub fn worth_a_line(r: &Reachability) -> bool {
    r.status != "complete"
        || r.definitely_lost_count > 0
        || r.indirectly_lost_count > 0
        || r.possibly_lost_count > 0
        || !r.framework_held.is_empty()
        || r.note.is_some()
}

/// One line about the scan for the summary: what it found, or that it was cut.
pub fn scan_line(r: &Reachability) -> String {
    // "possibly lost" only when there is any, so that the line of a scan without it reads as it
    // always did.
    let possibly =
        if r.possibly_lost_count > 0 { format!(", {} possibly lost", r.possibly_lost_count) } else { String::new() };
    let mut s = format!(
        "reachability scan {}: {} lost, {} indirectly lost{possibly}, {} reachable ({} read in {:.0} ms)",
        r.status,
        r.definitely_lost_count,
        r.indirectly_lost_count,
        r.reachable_count,
        fmt_bytes(r.scanned_bytes),
        r.elapsed_ms
    );
    for f in &r.framework_held {
        s += &format!(
            "; {} ({}) reachable by the framework's allocator ({})",
            count(f.count, "segment"),
            fmt_bytes(f.bytes),
            f.allocator
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Suspect;

    fn frame(function: &str) -> Frame {
        Frame { function: function.into(), ..Frame::default() }
    }

    #[test]
    fn suspects_with_lost_allocations_rank_first_and_say_so() {
        let mut report = crate::render::tests::sample();
        let growth = |site: u32, score: f64| Suspect { site, score, reason: "+1 MiB".into(), ..Suspect::default() };
        report.suspects = vec![growth(1, 0.9), growth(2, 0.5)];
        let mut file = ReachFile::default();
        let lost = SiteReach {
            definitely_lost_count: 4,
            definitely_lost_bytes: 4096,
            scanned_count: 5,
            ..SiteReach::default()
        };
        file.sites.insert(2, lost);
        file.sites.insert(3, SiteReach { definitely_lost_count: 1, definitely_lost_bytes: 1, ..SiteReach::default() });
        file.reachability.definitely_lost_count = 5;
        apply(&mut report, file);
        let got: Vec<(u32, &str)> = report.suspects.iter().map(|s| (s.site, s.reason.as_str())).collect();
        // Site 3 is not a growth suspect: its lost allocation does not make it one.
        assert_eq!(got, [(2, "4 of 5 allocations definitely lost (no pointer left); +1 MiB"), (1, "+1 MiB")]);
        assert_eq!(report.suspects[0].definitely_lost_bytes, 4096);
        assert_eq!(report.reachability.as_ref().map(|r| r.definitely_lost_count), Some(5));
    }

    /// A suspect of several sites (one cause, `sites`) counts the lost allocations of all of
    /// them: "1 of 1 … across 5 sites" read as if the other four were not scanned. It names
    /// the sites that hold them when others hold none (a new user read "site 0: … lost" beside
    /// site 0's holders, the lost ones being site 1's).
    #[test]
    fn a_suspect_of_several_sites_counts_them_all() {
        let mut report = crate::render::tests::sample();
        report.suspects =
            vec![Suspect { site: 7, sites: vec![7, 8, 9], reason: "+1 MiB".into(), ..Suspect::default() }];
        let mut file = ReachFile::default();
        for (id, lost, indirect) in [(7, 1, 0), (8, 0, 1), (9, 2, 0)] {
            let r = SiteReach {
                definitely_lost_count: lost,
                definitely_lost_bytes: lost * 1024,
                indirectly_lost_count: indirect,
                scanned_count: 2,
                ..SiteReach::default()
            };
            file.sites.insert(id, r);
        }
        apply(&mut report, file);
        let s = &report.suspects[0];
        // Which of them hold the lost ones, when not all do; the indirectly lost are said too.
        assert_eq!(
            s.reason,
            "3 of 6 allocations definitely lost (no pointer left; in sites 7, 9); 1 of 6 allocations indirectly lost \
             (pointed to only from lost memory; in site 8); +1 MiB"
        );
        assert_eq!((s.definitely_lost_count, s.definitely_lost_bytes), (3, 3072));
    }

    /// A suspect of one line's sites is not moved above a growth suspect by one member's lost
    /// allocations (a library's workspace made at the line's first call): it says them only.
    #[test]
    fn lost_allocations_do_not_move_a_suspect_of_one_lines_sites_up() {
        let mut report = crate::render::tests::sample();
        let growth = Suspect { site: 1, score: 0.9, reason: "+1 MiB".into(), ..Suspect::default() };
        let union =
            Suspect { site: 2, score: 0.5, line_sites: vec![2, 3, 4], reason: "+9 MiB".into(), ..Suspect::default() };
        report.suspects = vec![growth, union];
        let mut file = ReachFile::default();
        let lost = SiteReach {
            definitely_lost_count: 3,
            definitely_lost_bytes: 64 << 20,
            scanned_count: 3,
            ..SiteReach::default()
        };
        file.sites.insert(2, lost);
        let possibly = SiteReach { possibly_lost_count: 1, scanned_count: 1, ..SiteReach::default() };
        file.sites.insert(1, possibly);
        apply(&mut report, file);
        let got: Vec<(u32, &str)> = report.suspects.iter().map(|s| (s.site, s.reason.as_str())).collect();
        assert_eq!(
            got,
            [
                (1, "1 of 1 allocation possibly lost (a pointer left only in memory the scan cannot trust); +1 MiB"),
                (2, "3 of 3 allocations definitely lost (no pointer left); +9 MiB")
            ]
        );
    }

    #[test]
    fn caching_allocators_are_told_by_their_frames() {
        let torch =
            [frame("cudaMalloc"), frame("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc")];
        assert_eq!(framework_of(&torch), Some("PyTorch CUDACachingAllocator"));
        assert_eq!(framework_of(&[frame("tsl::BFCAllocator::AllocateRaw")]), Some("XLA BFC allocator"));
        assert_eq!(framework_of(&[frame("cupy.cuda.memory.SingleDeviceMemoryPool._malloc")]), Some("CuPy memory pool"));
        assert_eq!(framework_of(&[frame("main"), frame("cudaMalloc")]), None);
        let c10 = Frame { function: "??".into(), module: "/p/torch/lib/libc10_cuda.so".into(), ..Frame::default() };
        assert_eq!(framework_of(&[c10]), Some("PyTorch CUDACachingAllocator"));
    }
}
