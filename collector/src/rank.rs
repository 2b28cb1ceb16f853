//! Leak suspects: which sites look like they keep growing.
//!
//! A site is a suspect if and only if, at report time:
//! 1. at least [`MIN_LIVE`] of its allocations are live;
//! 2. its live bytes are at least 90% of its own peak (it is not draining);
//! 3. it was rising: over its active span (first to latest allocation), its live bytes at the
//!    end exceed those at one third and at two thirds of the span;
//! 4. its growth is sustained, shown in any of three ways:
//!    - its live allocations span at least [`MIN_COVERAGE`] of the run, or
//!    - they span at least [`MIN_LIFETIME_SHARE`] of the site's own lifetime (from its first
//!      live allocation to the report), which does not depend on how long the program took to
//!      start or to exit: a 1 ms leak in a 6 ms program that then spends 5 ms exiting on a
//!      loaded machine is one (seen in CI), a warm-up burst held for the rest of a run is not, or
//!    - it is still growing when the report is made: the time since its latest allocation is
//!      at most twice its own cadence (its live span over the gaps between its live
//!      allocations) or [`RECENT_SHARE`] of the run, whichever is longer. This catches a leak
//!      that grows only at the end of a run dominated by framework start-up (seconds of imports
//!      and context creation), as measured with PyTorch on the H200 (docs/gpu-matrix.md).
//!
//! Allocations that a context teardown (`cudaDeviceReset`, the last `cuDevicePrimaryCtxRelease`,
//! `cuCtxDestroy`) freed while they were live count as live here: the program never freed
//! them, and the teardown is often its last act (NVIDIA's samples end with `cudaDeviceReset`).
//!
//! Sites whose allocations are all freed fail (1); one large allocation held steady fails (1);
//! a warm-up burst that the program then keeps using without growing fails (4).
//!
//! The score, in [0, 1], is the mean of the share of the site's allocations never freed and
//! how steadily it rose (the share of eight equal slices of its active span in which its live
//! bytes went up). The suspect also carries the other measures of sustained growth, for a
//! person to weigh: the slope (bytes of its live allocations made after the first live one,
//! per second), and the age of its oldest live allocation as a share of the run.
//!
//! The reason reads like `+20.0 MiB per 12 ms over 60 ms, 6 live (120.0 MiB), none freed`:
//! the growth per the site's own cadence (the mean time between its live allocations, shown
//! with two significant digits), the time from its first to its latest live allocation, and
//! its live and freed allocations.

use std::collections::HashMap;

use crate::gauge::SiteStats;
use crate::live::State;
use crate::report::Suspect;
use crate::words::{fmt_bytes, fmt_period};

/// Fewest live allocations (and distinct allocation times) a suspect must have.
pub const MIN_LIVE: u64 = 3;

/// Smallest share of the run that a suspect's live allocations must span, unless it is still
/// growing at the end.
pub const MIN_COVERAGE: f64 = 0.25;

/// Smallest share of a site's own lifetime (first live allocation to the report) that its live
/// allocations must span to count as sustained growth.
pub const MIN_LIFETIME_SHARE: f64 = 0.10;

/// Share of the run within which a site's latest allocation always counts as recent.
pub const RECENT_SHARE: f64 = 0.10;

/// Number of equal slices of a site's active span that steadiness is measured over.
const SLICES: u64 = 8;

/// Ranks the sites of `state` as leak suspects, most likely first (score, then live bytes,
/// then site id). `run_start_ns..=run_end_ns` is the span the report covers (monotonic ns).
pub fn suspects(state: &State, run_start_ns: u64, run_end_ns: u64) -> Vec<Suspect> {
    let run = run_end_ns.saturating_sub(run_start_ns);
    if run == 0 {
        return Vec::new();
    }
    // Per site: (time, size) of each live allocation.
    let mut live_times: HashMap<u32, Vec<(u64, u64)>> = HashMap::new();
    // Allocations a context teardown freed count as live: the program never freed them.
    for e in state.live().map(|(_, e)| e).chain(&state.swept) {
        live_times.entry(e.site).or_default().push((e.ts_ns, e.size));
    }
    let mut out: Vec<Suspect> = state
        .sites
        .values()
        .filter_map(|site| {
            let mut live = live_times.remove(&site.id)?;
            live.sort_unstable();
            let mut times: Vec<u64> = live.iter().map(|&(t, _)| t).collect();
            times.dedup();
            // Bytes kept from allocations made after the first live one.
            let grown: u64 =
                live.iter().filter(|&&(t, _)| t > times[0]).map(|&(_, size)| size).fold(0, u64::saturating_add);
            judge(site, &times, grown, run, run_end_ns)
        })
        .collect();
    out.sort_by(|a, b| b.score.total_cmp(&a.score).then(b.live_bytes.cmp(&a.live_bytes)).then(a.site.cmp(&b.site)));
    out
}

/// Applies the four tests to one site; `times` are the distinct, sorted timestamps of its live
/// allocations (at least one), `grown` the bytes of its live allocations made after the first
/// of them, `run` the report's span in ns (> 0), ending at `run_end` (monotonic ns).
fn judge(site: &SiteStats, times: &[u64], grown: u64, run: u64, run_end: u64) -> Option<Suspect> {
    let mut g = site.gauge;
    g.live_count += site.swept_count;
    g.live_bytes = g.live_bytes.saturating_add(site.swept_bytes);
    if g.live_count < MIN_LIVE || (times.len() as u64) < MIN_LIVE {
        return None;
    }
    if u128::from(g.live_bytes) * 10 < u128::from(g.peak_live_bytes) * 9 {
        return None;
    }
    let (start, end) = (site.first_alloc_ns, site.last_alloc_ns);
    let span = end.saturating_sub(start);
    if span == 0 {
        return None;
    }
    let at = |num: u64, den: u64| {
        let t = start + (u128::from(span) * u128::from(num) / u128::from(den)) as u64;
        site.series.value_at(t)
    };
    if g.live_bytes <= at(1, 3) || g.live_bytes <= at(2, 3) {
        return None;
    }
    let (first_live, last_live) = (times[0], times[times.len() - 1]);
    let live_span = last_live - first_live;
    let cadence = live_span as f64 / (times.len() - 1) as f64;
    let idle = run_end.saturating_sub(site.last_alloc_ns) as f64;
    let covers = live_span as f64 >= MIN_COVERAGE * run as f64;
    let lifetime = run_end.saturating_sub(first_live) as f64;
    let own_share = live_span as f64 >= MIN_LIFETIME_SHARE * lifetime;
    let recent = idle <= (2.0 * cadence).max(RECENT_SHARE * run as f64);
    if !covers && !own_share && !recent {
        return None;
    }
    let rises = (0..SLICES).filter(|&i| at(i + 1, SLICES) > at(i, SLICES)).count();
    let steadiness = rises as f64 / SLICES as f64;
    let kept = g.live_count.min(site.alloc_count) as f64 / site.alloc_count.max(1) as f64;
    let score = ((kept + steadiness) / 2.0 * 1000.0).round() / 1000.0;
    let by_program = site.free_count.saturating_sub(site.swept_count);
    let freed =
        if by_program == 0 { "none freed".to_string() } else { format!("{by_program} of {} freed", site.alloc_count) };
    // live_span > 0: there are at least MIN_LIVE distinct times.
    let secs = live_span as f64 / 1e9;
    let slope = grown as f64 / secs;
    // Growth per cadence is growth per distinct allocation time; the cadence is shown rounded.
    let period = cadence / 1e9;
    let until = if site.swept_count > 0 { " until a context teardown freed them" } else { "" };
    let reason = format!(
        "+{} per {} over {}, {} live ({}){until}, {freed}",
        fmt_bytes((slope * period).round() as u64),
        fmt_period(period),
        fmt_period(secs),
        g.live_count,
        fmt_bytes(g.live_bytes),
    );
    let share = |x: f64| (x.clamp(0.0, 1.0) * 1000.0).round() / 1000.0;
    Some(Suspect {
        site: site.id,
        score,
        reason,
        live_bytes: g.live_bytes,
        live_count: g.live_count,
        growth_bytes_per_s: (g.live_bytes as f64 / secs).round(),
        slope_bytes_per_s: slope.round(),
        rising_share: share(steadiness),
        oldest_live_age_share: share(run_end.saturating_sub(first_live) as f64 / run as f64),
        never_freed_share: share(kept),
        definitely_lost_count: 0,
        definitely_lost_bytes: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::tests::{alloc, free};
    use crate::live::{Op, State};
    use gpushim_testkit::{MIB, MS};
    use gpushim_wire::Kind;

    /// A run of 1 s: site 1 leaks 1 MiB every 30 ms, site 2 allocates one 4 GiB pool at the
    /// start, site 3 allocates and frees 8 MiB every 10 ms, site 4 fills a 3-block pool in a
    /// 2 ms burst at the start, site 5 leaks 1 KiB but frees half of what it allocates.
    fn run() -> State {
        let mut s = State::default();
        let mut seq = 0;
        let mut ops = Vec::new();
        ops.push(alloc(0, 0, 0xa000_0000, 4 << 30, Kind::Device, 0, 2));
        for i in 0..3 {
            ops.push(alloc(0, (i + 1) * MS / 2, 0xb000_0000 + i * 0x1000, 64 * MIB, Kind::Device, 0, 4));
        }
        for i in 0..30u64 {
            let t = 10 * MS + i * 30 * MS;
            ops.push(alloc(0, t, 0x1000_0000 + i * 0x10_0000, MIB, Kind::Device, 0, 1));
        }
        for i in 0..100u64 {
            let t = i * 10 * MS;
            ops.push(alloc(0, t + 1, 0x2000_0000, 8 * MIB, Kind::Device, 0, 3));
            ops.push(free(0, t + 2, 0x2000_0000, 0));
        }
        for i in 0..40u64 {
            let t = 5 * MS + i * 20 * MS;
            ops.push(alloc(0, t, 0x3000_0000 + i * 0x1000, 1024, Kind::PinnedHost, -1, 5));
            if i % 2 == 1 {
                ops.push(free(0, t + 1, 0x3000_0000 + i * 0x1000, 0));
            }
        }
        ops.push(free(0, 1000 * MS, 0xdead, 0));
        ops.sort_by_key(|o| o.ts_ns());
        for mut op in ops {
            op.set_seq(seq);
            seq += 1;
            s.apply(&op);
        }
        s
    }

    #[test]
    fn growing_site_is_the_top_suspect_and_pools_and_churn_are_not() {
        let s = run();
        let got = suspects(&s, s.first_ts_ns.unwrap(), s.last_ts_ns);
        let ids: Vec<u32> = got.iter().map(|x| x.site).collect();
        assert_eq!(ids, vec![1, 5], "{got:#?}");
        let top = &got[0];
        assert_eq!(top.score, 1.0);
        assert_eq!(top.live_bytes, 30 * MIB);
        assert_eq!(top.live_count, 30);
        assert_eq!(top.reason, "+1.0 MiB per 30 ms over 870 ms, 30 live (30.0 MiB), none freed");
        assert_eq!(top.never_freed_share, 1.0);
        assert_eq!(top.rising_share, 1.0);
        // The oldest live allocation (10 ms) is 990 ms old at the end of the 1 s run.
        assert_eq!(top.oldest_live_age_share, 0.99);
        // 29 MiB kept after the first live allocation, over 870 ms.
        assert_eq!(top.slope_bytes_per_s, (29.0 * MIB as f64 / 0.87).round());
        // Site 5 kept half its allocations: score (0.5 + 1) / 2.
        assert_eq!(got[1].score, 0.75);
        assert_eq!(got[1].reason, "+1.0 KiB per 40 ms over 760 ms, 20 live (20.0 KiB), 20 of 40 freed");
        assert_eq!(got[1].never_freed_share, 0.5);
    }

    #[test]
    fn nothing_in_an_empty_or_instant_run() {
        let s = State::default();
        assert!(suspects(&s, 0, 0).is_empty());
    }

    /// S1's shape, measured on the H200: 5.5 s of start-up, then a caching-allocator site
    /// that adds a 20 MiB segment every 12 ms until the end; beside it a burst of three blocks
    /// at start-up that is then held for the whole run.
    #[test]
    fn late_leak_after_long_start_up_is_a_suspect_and_an_early_burst_is_not() {
        let mut s = State::default();
        let mut ops = vec![alloc(0, 0, 0x100, 1, Kind::Device, 0, 9)];
        for i in 0..3u64 {
            ops.push(alloc(0, MS + i * MS, 0xc000_0000 + i * 0x1000, 16 * MIB, Kind::Device, 0, 7));
        }
        for i in 0..6u64 {
            ops.push(alloc(0, 5480 * MS + i * 12 * MS, 0xd000_0000 + i * 0x10_0000, 20 * MIB, Kind::Device, 0, 8));
        }
        ops.push(free(0, 5600 * MS, 0x100, 0));
        for (seq, mut op) in ops.into_iter().enumerate() {
            op.set_seq(seq as u64);
            s.apply(&op);
        }
        let got = suspects(&s, 0, 5600 * MS);
        assert_eq!(got.iter().map(|x| x.site).collect::<Vec<_>>(), vec![8], "{got:#?}");
        assert_eq!(got[0].live_bytes, 120 * MIB);
        assert_eq!(got[0].reason, "+20.0 MiB per 12 ms over 60 ms, 6 live (120.0 MiB), none freed");
        // Young against the run (120 ms of 5.6 s), but still growing at the end.
        assert_eq!(got[0].oldest_live_age_share, 0.021);
    }

    /// The cudarc example as it ran in CI on a loaded machine: 100 leaked blocks between
    /// 0.16 ms and 1.2 ms of a 6.4 ms run, then 5 ms of exit. Beside it a 3-block burst at the
    /// start of a 1 s run that is then held.
    #[test]
    fn short_leak_before_a_slow_exit_is_a_suspect_and_a_held_burst_is_not() {
        const US: u64 = 1_000;
        let mut s = State::default();
        let mut ops = Vec::new();
        for i in 0..100u64 {
            ops.push(alloc(0, 160 * US + i * 10_400, 0xe000_0000 + i * 0x40_0000, 4 * MIB, Kind::Device, 0, 1));
        }
        for (seq, mut op) in ops.into_iter().enumerate() {
            if let crate::live::Op::Alloc(a) = &mut op {
                a.seq = seq as u64;
            }
            s.apply(&op);
        }
        let got = suspects(&s, 0, 6_400 * US);
        assert_eq!(got.iter().map(|x| x.site).collect::<Vec<_>>(), vec![1], "{got:#?}");

        let mut s = State::default();
        for i in 0..3u64 {
            s.apply(&alloc(i, MS / 2 + i * MS / 2, 0xc000_0000 + i * 0x1000, 16 * MIB, Kind::Device, 0, 7));
        }
        assert!(suspects(&s, 0, 1000 * MS).is_empty());
    }

    #[test]
    fn a_leak_that_only_a_context_teardown_ended_is_still_a_suspect() {
        use gpushim_wire::{Api, Reset};
        let mut ops: Vec<Op> =
            (0..30u64).map(|i| alloc(0, i * 30 * MS, 0x1000_0000 + i * 0x10_0000, MIB, Kind::Device, 0, 1)).collect();
        ops.push(Op::Reset(Reset { seq: 0, ts_ns: 900 * MS, device: 0, api: Api::CudaDeviceReset, tid: 7, ctx: 0 }));
        let mut s = State::default();
        for (seq, mut op) in ops.into_iter().enumerate() {
            op.set_seq(seq as u64);
            s.apply(&op);
        }
        assert_eq!(s.totals.gauge.live_bytes, 0, "the teardown freed the memory");
        let got = suspects(&s, 0, 1000 * MS);
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].site, got[0].live_count, got[0].live_bytes), (1, 30, 30 * MIB));
        assert!(
            got[0].reason.ends_with("30 live (30.0 MiB) until a context teardown freed them, none freed"),
            "{}",
            got[0].reason
        );
    }
}
