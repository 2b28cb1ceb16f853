//! The suspects grouped by cause: each named by its headline (or, for a caching allocator's
//! segments, by the line of user code that allocated the blocks inside them), suppressed ones
//! taken out, and pool segments that hold no tensors of their own left out.

use std::collections::{HashMap, HashSet};

use crate::account::live::State;
use crate::account::rank;
use crate::explain::frames::{headline, Headline};
use crate::explain::suppress::Suppressions;
use crate::report::{Holders, Site, Suppressed, Suspect};

/// The suspects by cause: each suspect site's headline (`frames::headline`), the sites a
/// suppression hides taken out (grouped the same way, by suppression), the others grouped
/// (`rank::group`) by headline key, each group with its headline, its number of distinct
/// threads, and its live bytes per kind in its reason when it holds more than one kind (a NCCL
/// communicator's device buffers and pinned host buffers are one cause: one suspect,
/// docs/gpu-matrix.md `fault_nccl_cycles`).
pub(super) fn by_cause(
    suspects: Vec<Suspect>,
    state: &State,
    sites: &[Site],
    blocks: &HashMap<u32, Vec<(Headline, u64)>>,
    walked: &Walked<'_>,
    notes: &mut Vec<String>,
) -> (Vec<Suspect>, Vec<Suppressed>) {
    let site_of: HashMap<u32, &Site> = sites.iter().map(|s| (s.id, s)).collect();
    let mut heads: HashMap<u32, (Headline, String)> = suspects
        .iter()
        .filter_map(|x| {
            let site = site_of.get(&x.site)?;
            let name = site.threads.first().map(|t| t.name.as_str()).filter(|n| !n.is_empty());
            Some((x.site, (headline(&site.frames, name)?, site.kind.clone())))
        })
        .collect();
    // A suspect whose segments hold PyTorch blocks mostly allocated at one line of user code is
    // named by that line: a caching allocator's segment is made by whichever call found the
    // pool full, while the blocks inside it say whose memory it holds (kept logits: three
    // suspects, each named by the call that made its segments, are one at the model's line).
    let mut by_blocks: HashSet<u32> = HashSet::new();
    for x in &suspects {
        let members = std::iter::once(x.site).chain(x.line_sites.iter().copied());
        if let Some(top) = top_block_head(members, blocks, walked) {
            if let Some(h) = heads.get_mut(&x.site) {
                h.0 = top;
                by_blocks.insert(x.site);
            }
        }
    }
    let key = |id: u32| heads.get(&id).map(|(h, _)| h.key.clone());
    let supp = Suppressions::global();
    notes.extend(supp.problems.iter().cloned());
    let mut hidden: Vec<(String, Suspect)> = Vec::new();
    let mut kept = Vec::new();
    for x in suspects {
        match site_of.get(&x.site).and_then(|s| supp.matching(&s.frames)) {
            Some(m) => hidden.push((m.name.clone(), x)),
            None => kept.push(x),
        }
    }
    let mut out = rank::group(kept, key);
    for x in &mut out {
        x.headline = heads.get(&x.site).map(|(h, _)| h.text.clone()).unwrap_or_default();
        if by_blocks.contains(&x.site) {
            let key = heads.get(&x.site).map(|(h, _)| h.key.as_str()).unwrap_or_default();
            let (mut here, mut all) = (0u64, 0u64);
            for (h, b) in x.sites.iter().filter_map(|id| blocks.get(id)).flatten() {
                all = all.saturating_add(*b);
                if h.key == key {
                    here = here.saturating_add(*b);
                }
            }
            x.reason = format!(
                "{}; named by PyTorch's blocks: {} of the {} in live blocks of its segments were allocated at this line",
                x.reason,
                crate::report::words::fmt_bytes(here),
                crate::report::words::fmt_bytes(all)
            );
        }
        let tids: HashSet<u32> =
            x.sites.iter().filter_map(|id| state.sites.get(id)).flat_map(|s| s.threads.keys().copied()).collect();
        x.threads = tids.len() as u64;
        let mut by_kind: Vec<(String, u64)> = Vec::new();
        for site in x.sites.iter().filter_map(|id| site_of.get(id)) {
            match by_kind.iter_mut().find(|(k, _)| *k == site.kind) {
                Some(k) => k.1 = k.1.saturating_add(site.live_bytes),
                None => by_kind.push((site.kind.clone(), site.live_bytes)),
            }
        }
        if by_kind.len() > 1 {
            by_kind.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            let parts: Vec<String> = by_kind
                .iter()
                .map(|(k, b)| format!("{} {}", k.replace('_', " "), crate::report::words::fmt_bytes(*b)))
                .collect();
            x.reason = format!("{}; by kind: {}", x.reason, parts.join(", "));
        }
    }
    // A suspect whose segments of PyTorch's caching allocator are mostly free blocks at exit,
    // beside a suspect whose segments hold tensors, is the pool growing around memory held
    // elsewhere (kept logits fragment the pool, whose new segments, made
    // by the backward pass and the optimizer, end up free), not a cause of its own. Alone, it
    // stays: the program may have let go of what it held only at the end (a loop inside
    // `main()` whose list is gone at exit).
    let shares: Vec<Option<(u64, u64, u64)>> = out.iter().map(|x| torch_share(x, walked)).collect();
    let held = |s: &Option<(u64, u64, u64)>| s.is_some_and(|(live, in_use, _)| in_use.saturating_mul(2) >= live);
    let pool_only = |s: &Option<(u64, u64, u64)>| {
        s.is_some_and(|(live, in_use, other)| in_use.saturating_mul(2) < live && other <= live)
    };
    if shares.iter().any(held) {
        let mut share = shares.iter();
        out.retain(|x| {
            let s = share.next().copied().flatten();
            let k = !pool_only(&s);
            if !k {
                let (live, in_use, _) = s.unwrap_or_default();
                notes.push(format!(
                    "not a suspect: {}, {} in segments of PyTorch's caching allocator of which {} were in tensors at exit, \
                     beside a suspect whose segments hold tensors (the rest is free memory the allocator keeps for reuse)",
                    x.headline,
                    crate::report::words::fmt_bytes(live),
                    crate::report::words::fmt_bytes(in_use)
                ));
            }
            k
        });
    }
    let mut suppressed: Vec<Suppressed> = Vec::new();
    for (name, x) in hidden {
        // A union of the sites of one line hides all of them.
        let ids = std::iter::once(x.site).chain(x.line_sites.iter().copied());
        match suppressed.iter_mut().find(|s| s.suppression == name) {
            Some(s) => {
                for id in ids {
                    if !s.sites.contains(&id) {
                        s.sites.push(id);
                    }
                }
                s.live_bytes = s.live_bytes.saturating_add(x.live_bytes);
            }
            None => {
                let mut sites: Vec<u32> = Vec::new();
                for id in ids {
                    if !sites.contains(&id) {
                        sites.push(id);
                    }
                }
                suppressed.push(Suppressed { suppression: name, sites, live_bytes: x.live_bytes })
            }
        }
    }
    (out, suppressed)
}

/// The suspects less those that are a caching pool keeping freed memory: every site of the
/// suspect is a pool's (`pool`), and the complete exit heap walk (`walked`; `None` when there
/// was none or it did not finish) found some of their memory in use but less than half of it
/// (PyTorch's allocated bytes, or the objects found in them). The pool grew to a working set
/// and keeps what the program freed for reuse: a bounded cache refilled with new keys, a
/// buffer that grew with its input. One note each says what the walk saw. A suspect whose
/// segments hold nothing in use at exit stays: the program let go of its memory only at the
/// end (a loop in `main()`, whose list is gone when the exit walk runs), which the walk cannot
/// tell from a leak.
pub(super) fn without_pool_retention(
    suspects: Vec<Suspect>,
    pool: &HashSet<u32>,
    walked: Option<&Walked<'_>>,
    notes: &mut Vec<String>,
) -> Vec<Suspect> {
    let Some(walked) = walked else { return suspects };
    let retained = |x: &Suspect| -> Option<(u64, u64)> {
        let (mut live, mut in_use) = (0u64, 0u64);
        let ids: HashSet<u32> = std::iter::once(x.site).chain(x.line_sites.iter().copied()).collect();
        for id in ids {
            let s = walked.get(&id).filter(|_| pool.contains(&id))?;
            live = live.saturating_add(s.live_bytes);
            in_use = in_use.saturating_add(s.in_use_bytes.min(s.live_bytes));
        }
        (in_use > 0 && in_use.saturating_mul(2) < live).then_some((live, in_use))
    };
    suspects
        .into_iter()
        .filter(|x| match retained(x) {
            None => true,
            Some((live, in_use)) => {
                notes.push(format!(
                    "not a suspect: site {}: {} in a caching pool's segments of which {} were in use at exit (the heap walk); \
                     the rest is memory the program freed and the pool keeps for reuse: a working set that grew, not memory that accumulates",
                    x.site,
                    crate::report::words::fmt_bytes(live),
                    crate::report::words::fmt_bytes(in_use)
                ));
                false
            }
        })
        .collect()
}

/// The exit heap walk's sites by id (empty without a walk), read by the suspects' grouping.
pub(super) type Walked<'a> = HashMap<u32, &'a crate::report::SiteHolders>;

/// The sites of `holders` by id.
pub(super) fn walked_sites(holders: Option<&crate::report::Holders>) -> Walked<'_> {
    holders.map_or(&[][..], |h| h.sites.as_slice()).iter().filter_map(|s| Some((s.site?, s))).collect()
}

/// Per site, the headlines of the PyTorch blocks inside its segments that were allocated from a
/// line of user code, with their bytes (`walked`: the exit heap walk's sites and their `blocks`), each block
/// frame classed and named as the site's own Python frames are (`Python::block_frame`).
pub(super) fn block_heads(
    walked: &Walked<'_>,
    py: &crate::explain::pyframes::Python,
) -> HashMap<u32, Vec<(Headline, u64)>> {
    let mut out: HashMap<u32, Vec<(Headline, u64)>> = HashMap::new();
    for (&site, s) in walked {
        for b in s.blocks.iter().chain(&s.more_blocks) {
            let frames: Vec<crate::report::Frame> =
                b.frames.iter().map(|f| py.block_frame(&f.file, f.line, &f.function)).collect();
            if let Some(h) = headline(&frames, None).filter(|h| h.key.starts_with("user ")) {
                out.entry(site).or_default().push((h, b.bytes));
            }
        }
    }
    out
}

/// The headline holding most of the block bytes of `sites` (`block_heads`), if it holds at
/// least half of their bytes in use (PyTorch's allocated bytes in their segments, at least the
/// blocks found: blocks without a recorded stack or without a user frame count against it).
pub(super) fn top_block_head(
    sites: impl Iterator<Item = u32>,
    blocks: &HashMap<u32, Vec<(Headline, u64)>>,
    walked: &Walked<'_>,
) -> Option<Headline> {
    let mut tally: Vec<(Headline, u64)> = Vec::new();
    let (mut total, mut in_use) = (0u64, 0u64);
    let mut seen = HashSet::new();
    for id in sites.filter(|id| seen.insert(*id)) {
        if let Some(s) = walked.get(&id) {
            if s.in_use_from == "torch" {
                in_use = in_use.saturating_add(s.in_use_bytes);
            }
        }
        for (h, b) in blocks.get(&id).into_iter().flatten() {
            total = total.saturating_add(*b);
            match tally.iter_mut().find(|(t, _)| t.key == h.key) {
                Some(t) => t.1 = t.1.saturating_add(*b),
                None => tally.push((h.clone(), *b)),
            }
        }
    }
    let (h, b) = tally.into_iter().max_by(|a, b| a.1.cmp(&b.1).then(b.0.key.cmp(&a.0.key)))?;
    (b > 0 && b.saturating_mul(2) >= total.max(in_use)).then_some(h)
}

/// A suspect's memory by PyTorch's own word in the exit heap walk: the live bytes of its sites
/// that are segments of PyTorch's caching allocator (`in_use_from` `torch`), the bytes in use
/// in them (allocated blocks), and the live bytes of its other sites; `None` without a walk
/// or without such sites.
fn torch_share(x: &Suspect, walked: &Walked<'_>) -> Option<(u64, u64, u64)> {
    let (mut live, mut in_use, mut other) = (0u64, 0u64, 0u64);
    for s in x.sites.iter().filter_map(|id| walked.get(id)) {
        if s.in_use_from == "torch" {
            live = live.saturating_add(s.live_bytes);
            in_use = in_use.saturating_add(s.in_use_bytes.min(s.live_bytes));
        } else {
            other = other.saturating_add(s.live_bytes);
        }
    }
    (live > 0).then_some((live, in_use, other))
}

/// Per site of the exit heap walk, the objects of its largest group reached by one path from a
/// root (a container's items: `train.py global 'history' → list[*] → 400 objects`), when that
/// group holds at least half the site's live bytes (`rank::Hints::accumulated`).
pub(super) fn accumulated(holders: Option<&Holders>) -> HashMap<u32, u64> {
    let mut out = HashMap::new();
    for s in holders.map(|h| h.sites.as_slice()).unwrap_or_default() {
        let Some(site) = s.site else { continue };
        let most = s
            .holders
            .iter()
            .filter(|l| l.how == "path" && l.bytes.saturating_mul(2) >= s.live_bytes)
            .map(|l| l.objects)
            .max();
        if let Some(n) = most {
            out.insert(site, n);
        }
    }
    out
}
