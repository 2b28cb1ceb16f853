//! Leak suspects: which sites look like they keep growing.
//!
//! A site is a suspect if and only if, at report time:
//! 1. at least [`MIN_LIVE`] of its allocations are live;
//! 2. its live bytes are at least 75% of its own peak (it is not draining);
//! 3. it was rising: over its active span (first to latest allocation), its live bytes at the
//!    end exceed every value recorded up to two thirds of the span (a working set that is
//!    freed and made again every step is at its usual level at the end, not above it);
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
//!      and context creation), as PyTorch's is (docs/gpu-matrix.md).
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
//!
//! [`suspects_with`] adds what the symbolized stacks and the stream tell ([`Hints`]): sites of
//! one kind that share their line of user code are also judged as one union (a suspect union
//! replaces its members' verdicts and lists them in `line_sites`); the tests of sustained
//! growth end when the program's own work ended (a CPython program's exit heap walk), not after
//! the interpreter's teardown; and a site or union owned by a caching pool that is not growing
//! at that end and has held still for longer than it grew is a pool warming up, not a suspect;
//! nor is a line whose sites each made one allocation of a size no other made (an
//! initialization: a library handle's buffers at their first use); and a site or union after
//! whose growth the program went on working for longer than it grew, counted in its own GPU
//! calls ([`Hints::activity`], [`warmed_up`]), is a warm-up however fast.

use std::collections::{HashMap, HashSet};

use crate::account::gauge::SiteStats;
use crate::account::live::State;
use crate::report::words::{fmt_bytes, fmt_period};
use crate::report::Suspect;

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

/// What the ranking knows about sites beyond their timing, from their symbolized stacks
/// (collector/src/explain/owners.rs) and the stream.
#[derive(Clone, Debug, Default)]
pub struct Hints {
    /// Per site: the line of the program's own code it came from (`owners::user_line`). Sites
    /// of one kind that share a line are also judged together, as one union: a pool's segments
    /// for one line of code come from changing native stacks as the pool grows, so each site
    /// alone sees only a few allocations (as when a program makes a new stream per iteration).
    /// A library's own state (`owners::Owner::library`) has no line here.
    pub line: HashMap<u32, String>,
    /// Sites whose memory a caching pool holds (`owners::Owner::pool`). A pool grows to its
    /// working set and then holds still: such a site (or union) that is no longer growing at
    /// the end of the program's work and has held still for longer than it grew is a pool
    /// warming up, not a suspect.
    pub pool: std::collections::HashSet<u32>,
    /// When the program's own work ended (monotonic ns), if known: the start of a CPython
    /// program's `atexit` phase (the exit heap walk). Interpreter teardown after it is not
    /// part of the run for the tests of sustained growth.
    pub work_end_ns: Option<u64>,
    /// The program's activity over time: `(monotonic ns, GPU calls so far)`, oldest first (the
    /// shim counts kernel launches, graph launches and memsets). Empty when not known.
    pub activity: Vec<(u64, u64)>,
    /// Per site, the objects of its live memory that the exit heap walk found accumulated in
    /// one container (the largest group of objects reached by one path, when it holds at least
    /// half the site's live bytes): evidence of accumulation however fast it happened.
    pub accumulated: HashMap<u32, u64>,
}

/// Fewest objects in one container that count as accumulation (see [`Hints::accumulated`]).
pub const MIN_ACCUMULATED: u64 = 8;

/// Fewest GPU calls the program must have made after a track's last growth for its steps to
/// call the growth a warm-up (see [`warmed_up`]).
pub const MIN_STEPS_AFTER: u64 = 16;

/// The GPU calls the program made while a track grew (from its first to its latest live
/// allocation) and after it (to the end of the stream), from `activity` (see [`Hints`]);
/// `None` without activity, or when no count is known from before the track's latest growth
/// (allocations of a graph's launches carry none: a count known only at the end would read
/// as all of the program's calls coming after the growth).
fn steps(activity: &[(u64, u64)], first: u64, last: u64) -> Option<(u64, u64)> {
    let &(_, end) = activity.last()?;
    if activity.first().is_none_or(|&(ts, _)| ts > last) {
        return None;
    }
    let at = |t: u64| match activity.partition_point(|&(ts, _)| ts <= t) {
        0 => 0,
        i => activity[i - 1].1,
    };
    let (a, b) = (at(first), at(last));
    Some((b.saturating_sub(a), end.saturating_sub(b)))
}

/// True if the program's own steps say a track that grew in `live` distinct allocations
/// (first to last) then held still: after its last growth the program went on working for
/// more GPU calls than the whole growth took, more than four of its growth's own steps
/// (calls per allocation), and at least [`MIN_STEPS_AFTER`]. A workspace cache filled in the
/// first steps of 300, a bounded cache full after 15 of 100: warm-ups however fast. A leak
/// grows until the end: after its last allocation come less than one or two of its steps.
fn warmed_up(activity: &[(u64, u64)], first: u64, last: u64, live: usize) -> bool {
    let Some((grew, after)) = steps(activity, first, last) else { return false };
    let per = grew as f64 / live.saturating_sub(1).max(1) as f64;
    after >= MIN_STEPS_AFTER && after > grew && after as f64 > 4.0 * per
}

/// Ranks the sites of `state` as leak suspects, most live bytes first (then score,
/// then site id). `run_start_ns..=run_end_ns` is the span the report covers (monotonic ns).
pub fn suspects(state: &State, run_start_ns: u64, run_end_ns: u64) -> Vec<Suspect> {
    suspects_with(state, run_start_ns, run_end_ns, &Hints::default())
}

/// One site, or the union of the sites that share a line of user code, as the tests see it.
struct Track<'a> {
    /// The site reported (the union's member with most live bytes).
    id: u32,
    /// Live bytes and count (a teardown's sweep counted as live) and peak live bytes.
    gauge: crate::report::Gauge,
    alloc_count: u64,
    free_count: u64,
    swept_count: u64,
    /// Allocations only the interpreter's teardown freed (counted as live in `gauge`).
    torn_count: u64,
    first_alloc_ns: u64,
    last_alloc_ns: u64,
    /// One site's live bytes over time ...
    series: Option<&'a crate::account::gauge::SiteSeries>,
    /// ... or a union's: `(time, summed live bytes)` at each point of its members' series.
    summed: Vec<(u64, u64)>,
    /// Distinct sorted times of the live allocations.
    times: Vec<u64>,
    /// Bytes of the live allocations made after the first of them.
    grown: u64,
    pool: bool,
    /// Member sites of a union (empty for one site).
    members: Vec<u32>,
}

impl Track<'_> {
    fn value_at(&self, t: u64) -> u64 {
        match self.series {
            Some(s) => s.value_at(t),
            None => {
                let i = self.summed.partition_point(|&(ts, _)| ts <= t);
                if i == 0 {
                    0
                } else {
                    self.summed[i - 1].1
                }
            }
        }
    }

    /// The most live bytes recorded at any point up to `t` (monotonic ns).
    fn max_until(&self, t: u64) -> u64 {
        let points = match self.series {
            Some(s) => s.points(),
            None => &self.summed,
        };
        points.iter().take_while(|&&(ts, _)| ts <= t).map(|&(_, v)| v).max().unwrap_or(0)
    }
}

/// The sum of step functions `series` (each the value of its last point at or before a time,
/// 0 before its first), at every point of any of them: one sweep, O(n log n) in all points.
fn sum_series(series: &[&crate::account::gauge::SiteSeries]) -> Vec<(u64, u64)> {
    let mut steps: Vec<(u64, usize, u64)> =
        series.iter().enumerate().flat_map(|(i, s)| s.points().iter().map(move |&(t, v)| (t, i, v))).collect();
    steps.sort_unstable_by_key(|&(t, i, _)| (t, i));
    let mut now = vec![0u64; series.len()];
    let mut sum: u64 = 0;
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(steps.len());
    for (t, i, v) in steps {
        sum = sum.saturating_sub(now[i]).saturating_add(v);
        now[i] = v;
        match out.last_mut() {
            Some(last) if last.0 == t => last.1 = sum,
            _ => out.push((t, sum)),
        }
    }
    out
}

fn track<'a>(sites: &[&'a SiteStats], live: &[(u64, u64)], pool: bool) -> Track<'a> {
    let mut live = live.to_vec();
    live.sort_unstable();
    let mut times: Vec<u64> = live.iter().map(|&(t, _)| t).collect();
    times.dedup();
    let first = times.first().copied().unwrap_or(0);
    let grown = live.iter().filter(|&&(t, _)| t > first).map(|&(_, size)| size).fold(0, u64::saturating_add);
    let mut gauge = crate::report::Gauge::default();
    for s in sites {
        gauge.live_count = gauge.live_count.saturating_add(s.gauge.live_count).saturating_add(s.swept_count);
        gauge.live_bytes = gauge.live_bytes.saturating_add(s.gauge.live_bytes).saturating_add(s.swept_bytes);
    }
    let mut t = Track {
        id: sites
            .iter()
            .max_by_key(|s| (s.gauge.live_bytes + s.swept_bytes, std::cmp::Reverse(s.id)))
            .map_or(0, |s| s.id),
        gauge,
        alloc_count: sites.iter().map(|s| s.alloc_count).fold(0, u64::saturating_add),
        free_count: sites.iter().map(|s| s.free_count).fold(0, u64::saturating_add),
        swept_count: sites.iter().map(|s| s.swept_count).fold(0, u64::saturating_add),
        torn_count: sites.iter().map(|s| s.torn_count).fold(0, u64::saturating_add),
        first_alloc_ns: sites.iter().map(|s| s.first_alloc_ns).min().unwrap_or(0),
        last_alloc_ns: sites.iter().map(|s| s.last_alloc_ns).max().unwrap_or(0),
        series: if let [one] = sites { Some(&one.series) } else { None },
        summed: if sites.len() > 1 {
            sum_series(&sites.iter().map(|s| &s.series).collect::<Vec<_>>())
        } else {
            Vec::new()
        },
        times,
        grown,
        pool,
        members: if sites.len() > 1 { sites.iter().map(|s| s.id).collect() } else { Vec::new() },
    };
    t.gauge.peak_live_bytes = if let [one] = sites {
        one.gauge.peak_live_bytes
    } else {
        // The union's peak, at the points of its members' series.
        t.summed.iter().map(|&(_, v)| v).max().unwrap_or(0).max(t.gauge.live_bytes)
    };
    t
}

/// As [`suspects`], with what the symbolized stacks tell (see [`Hints`]). A union of sites
/// sharing a line that is a suspect replaces its members' own verdicts: it is reported under
/// its member with most live bytes, with `line_sites` naming all members.
pub fn suspects_with(state: &State, run_start_ns: u64, run_end_ns: u64, hints: &Hints) -> Vec<Suspect> {
    let run_end_ns = hints.work_end_ns.map_or(run_end_ns, |w| w.clamp(run_start_ns, run_end_ns));
    let run = run_end_ns.saturating_sub(run_start_ns);
    if run == 0 {
        return Vec::new();
    }
    let live_times = live_times(state);
    let mut out: Vec<Suspect> = Vec::new();
    let mut groups: HashMap<(u8, &str), Vec<&SiteStats>> = HashMap::new();
    let mut ids: Vec<u32> = live_times.keys().copied().collect();
    ids.sort_unstable();
    for id in ids {
        let Some(site) = state.sites.get(&id) else { continue };
        let t = track(&[site], &live_times[&id], hints.pool.contains(&id));
        let heaped = hints.accumulated.get(&id).copied().unwrap_or(0) >= MIN_ACCUMULATED;
        if let Some(s) = judge(&t, run, run_end_ns, &hints.activity, heaped) {
            out.push(s);
        }
        if let Some(line) = hints.line.get(&id) {
            groups.entry((site.kind as u8, line.as_str())).or_default().push(site);
        }
    }
    let mut unions: Vec<Suspect> = groups
        .into_values()
        .filter(|g| g.len() > 1 && !one_of_each(g, &live_times))
        .filter_map(|g| {
            let live: Vec<(u64, u64)> = g.iter().flat_map(|s| live_times[&s.id].iter().copied()).collect();
            let pool = g.iter().any(|s| hints.pool.contains(&s.id));
            let heaped =
                g.iter().map(|s| hints.accumulated.get(&s.id).copied().unwrap_or(0)).sum::<u64>() >= MIN_ACCUMULATED;
            judge(&track(&g, &live, pool), run, run_end_ns, &hints.activity, heaped)
        })
        .collect();
    // A union that is a suspect stands for its members.
    let in_unions: std::collections::HashSet<u32> = unions.iter().flat_map(|u| u.line_sites.iter().copied()).collect();
    out.retain(|s| !in_unions.contains(&s.site));
    out.append(&mut unions);
    out.sort_by(|a, b| b.live_bytes.cmp(&a.live_bytes).then(b.score.total_cmp(&a.score)).then(a.site.cmp(&b.site)));
    out
}

/// Growth that is no suspect: a site that rose to its level and then held still for longer than
/// it grew (a warm-up, a cache filled once, a caching pool that reached its working set).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Held {
    /// The site.
    pub site: u32,
    /// Its live bytes and allocations at the end.
    pub live_bytes: u64,
    pub live_count: u64,
    /// How long it grew (its first to its latest live allocation) and then held still (to the
    /// end of the program's work), ns.
    pub grew_ns: u64,
    pub held_ns: u64,
    /// Its memory is a caching pool's.
    pub pool: bool,
    /// The program's GPU calls while it grew and after it ([`Hints::activity`]), if known.
    pub steps: Option<(u64, u64)>,
}

/// Per site: (time, size) of each live allocation. Allocations a context teardown freed count
/// as live: the program never freed them.
fn live_times(state: &State) -> HashMap<u32, Vec<(u64, u64)>> {
    let mut live_times: HashMap<u32, Vec<(u64, u64)>> = HashMap::new();
    for e in state.live().map(|(_, e)| e).chain(&state.swept) {
        live_times.entry(e.site).or_default().push((e.ts_ns, e.size));
    }
    live_times
}

/// The largest [`Held`] growth of `state` (most live bytes, then lowest site id), for the line
/// a report without suspects says about what it saw; `None` when no site rose and held.
pub fn held_growth(state: &State, run_start_ns: u64, run_end_ns: u64, hints: &Hints) -> Option<Held> {
    let run_end = hints.work_end_ns.map_or(run_end_ns, |w| w.clamp(run_start_ns, run_end_ns));
    let mut best: Option<Held> = None;
    for (id, live) in live_times(state) {
        let Some(site) = state.sites.get(&id) else { continue };
        let t = track(&[site], &live, hints.pool.contains(&id));
        let g = t.gauge;
        if g.live_count < MIN_LIVE || (t.times.len() as u64) < MIN_LIVE {
            continue;
        }
        if u128::from(g.live_bytes) * 4 < u128::from(g.peak_live_bytes) * 3 {
            continue;
        }
        let (first, last) = (t.times[0], t.times[t.times.len() - 1]);
        let span = t.last_alloc_ns.saturating_sub(t.first_alloc_ns);
        let third = t.first_alloc_ns + span / 3;
        let (grew, held) = (last - first, run_end.saturating_sub(t.last_alloc_ns));
        let still = held > grew || warmed_up(&hints.activity, first, last, t.times.len());
        if span == 0 || g.live_bytes <= t.value_at(third) || !still {
            continue;
        }
        let h = Held {
            site: id,
            live_bytes: g.live_bytes,
            live_count: g.live_count,
            grew_ns: grew,
            held_ns: held,
            pool: t.pool,
            steps: steps(&hints.activity, first, last),
        };
        if best.is_none_or(|b| (h.live_bytes, std::cmp::Reverse(h.site)) > (b.live_bytes, std::cmp::Reverse(b.site))) {
            best = Some(h);
        }
    }
    best
}

/// True if and only if every site of a line's union made one allocation, still live, and no two
/// of them have the same size: the line made one of each thing it needs (a library handle's
/// workspace, its state and its caches at their first use), an initialization rather than
/// growth: a training loop's first step creates cuBLAS's handle and workspaces, five sizes from
/// five stacks under the forward's line, and the same again under the backward's line on the
/// autograd thread, late in a run dominated by start-up (docs/gpu-matrix.md, H_train).
/// Growth repeats its allocations: the same size again, or a site that allocates again.
fn one_of_each(group: &[&SiteStats], live_times: &HashMap<u32, Vec<(u64, u64)>>) -> bool {
    let mut sizes = HashSet::new();
    group
        .iter()
        .all(|s| s.alloc_count == 1 && live_times.get(&s.id).is_some_and(|t| t.len() == 1 && sizes.insert(t[0].1)))
}

/// Applies the four tests to one track; `run` is the report's span in ns (> 0), ending at
/// `run_end` (monotonic ns).
fn judge(site: &Track<'_>, run: u64, run_end: u64, activity: &[(u64, u64)], heaped: bool) -> Option<Suspect> {
    let g = site.gauge;
    let times = &site.times;
    if times.is_empty() || g.live_count < MIN_LIVE || (times.len() as u64) < MIN_LIVE {
        return None;
    }
    // Drained from its peak: not held, unless its objects lie accumulated in one container
    // (JAX's asynchronous dispatch can leave a step's temporaries live beside the kept arrays
    // for a moment: a peak the kept ones never reached).
    if u128::from(g.live_bytes) * 4 < u128::from(g.peak_live_bytes) * 3 && !heaped {
        return None;
    }
    let (start, end) = (site.first_alloc_ns, site.last_alloc_ns);
    let span = end.saturating_sub(start);
    if span == 0 {
        return None;
    }
    let at = |num: u64, den: u64| {
        let t = start + (u128::from(span) * u128::from(num) / u128::from(den)) as u64;
        site.value_at(t)
    };
    // Above everything recorded up to two thirds of the span, not only the values at one and two
    // thirds: a site whose allocations are freed every step and whose last step's are live at
    // the end (a working set: gradients freed at the next `zero_grad`) is at its usual level.
    let two_thirds = start + (u128::from(span) * 2 / 3) as u64;
    if g.live_bytes <= at(1, 3) || g.live_bytes <= site.max_until(two_thirds) {
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
    // Growth too short by the clock is still a suspect when its objects lie accumulated in one
    // container (`heaped`) and it went on into the run's second half (a warm-up's containers
    // fill early), unless the program's own steps say it held.
    let heaped = heaped && idle <= 0.5 * run as f64;
    if !covers && !own_share && !recent && !heaped {
        return None;
    }
    let by_heap = !covers && !own_share && !recent;
    // A pool that stopped growing and has held still for longer than it grew has warmed up.
    if site.pool && !recent && idle > live_span as f64 {
        return None;
    }
    // So has any site after which the program went on working for longer than it grew, in
    // its own steps, however little wall time that took.
    if warmed_up(activity, first_live, last_live, times.len()) {
        return None;
    }
    let rises = (0..SLICES).filter(|&i| at(i + 1, SLICES) > at(i, SLICES)).count();
    let steadiness = rises as f64 / SLICES as f64;
    let kept = g.live_count.min(site.alloc_count) as f64 / site.alloc_count.max(1) as f64;
    let score = ((kept + steadiness) / 2.0 * 1000.0).round() / 1000.0;
    // live_span > 0: there are at least MIN_LIVE distinct times.
    let secs = live_span as f64 / 1e9;
    let slope = site.grown as f64 / secs;
    // Growth per cadence is growth per distinct allocation time; the cadence is shown rounded.
    let period = cadence / 1e9;
    let until = if site.swept_count > 0 {
        " until a context teardown freed them"
    } else if site.torn_count > 0 {
        " until the interpreter's teardown freed them"
    } else {
        ""
    };
    // After "a teardown freed them", who freed the others is said: the program.
    let by_program = site.free_count.saturating_sub(site.swept_count);
    let freed = match (by_program, until.is_empty()) {
        (0, true) => "none freed".to_string(),
        (0, false) => "the program freed none".to_string(),
        (n, true) => format!("{n} of {} freed", site.alloc_count),
        (n, false) => format!("the program freed {n} of {}", site.alloc_count),
    };
    let across = if site.members.is_empty() {
        String::new()
    } else {
        format!(" across {} sites of one line", site.members.len())
    };
    // The evidence when the clock alone would not have made it a suspect.
    let heap = if by_heap { "; accumulated in one container (the exit's heap walk)" } else { "" };
    let reason = format!(
        "+{} per {} over {}, {} live ({}){across}{until}, {freed}{heap}",
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
        line_sites: site.members.clone(),
        sites: vec![site.id],
        headline: String::new(),
        threads: 0,
        definitely_lost_count: 0,
        definitely_lost_bytes: 0,
    })
}

/// The definitely lost bytes that move a suspect up a report (explain/reach.rs): all of its
/// sites', except for a union of one line's sites (`line_sites`), which its members' lost
/// allocations do not move up (a library's workspace made at the line's first call would
/// otherwise make the whole line's growth the top suspect).
pub fn lost_rank(s: &Suspect) -> u64 {
    if s.line_sites.is_empty() {
        s.definitely_lost_bytes
    } else {
        0
    }
}

/// The order of a report's suspects: most definitely lost bytes first ([`lost_rank`]), then
/// most live bytes, the highest score, the lowest site id.
pub fn report_order(a: &Suspect, b: &Suspect) -> std::cmp::Ordering {
    lost_rank(b)
        .cmp(&lost_rank(a))
        .then(b.live_bytes.cmp(&a.live_bytes))
        .then(b.score.total_cmp(&a.score))
        .then(a.site.cmp(&b.site))
}

/// Groups suspects by cause: suspects whose sites have the same `key_of` (their headline frame;
/// `None`: a group of its own) become one, headed by its largest site (most live bytes, then
/// lowest id), with every member in `sites` (largest first), the members' live bytes and
/// allocations summed, the highest score, and the largest site's other measures. The reason of
/// a group of several says so, counting every site (a member may be the union of the sites of
/// one line): `3 sites, 30 live (30.0 MiB) in all; the largest: …`. The groups are ordered as
/// a report orders its suspects ([`report_order`]; nothing is definitely lost before the scan).
pub fn group(suspects: Vec<Suspect>, key_of: impl Fn(u32) -> Option<String>) -> Vec<Suspect> {
    let mut groups: Vec<Vec<Suspect>> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    for s in suspects {
        match key_of(s.site) {
            Some(k) => match index.get(&k) {
                Some(&i) => groups[i].push(s),
                None => {
                    index.insert(k, groups.len());
                    groups.push(vec![s]);
                }
            },
            None => groups.push(vec![s]),
        }
    }
    let mut out: Vec<Suspect> = groups
        .into_iter()
        .map(|mut members| {
            members.sort_by(|a, b| b.live_bytes.cmp(&a.live_bytes).then(a.site.cmp(&b.site)));
            let mut head = members[0].clone();
            // Each member's sites: its own, or all the sites of its line when its growth was
            // found over their union (`line_sites`); the largest member's site first.
            head.sites = Vec::new();
            for m in &members {
                head.sites.push(m.site);
                head.sites.extend(m.line_sites.iter().copied().filter(|&id| id != m.site));
            }
            let mut seen = HashSet::new();
            head.sites.retain(|id| seen.insert(*id));
            if members.len() > 1 {
                head.live_bytes = members.iter().map(|m| m.live_bytes).fold(0, u64::saturating_add);
                head.live_count = members.iter().map(|m| m.live_count).sum();
                head.score = members.iter().map(|m| m.score).fold(0.0, f64::max);
                head.reason = format!(
                    "{} sites, {} live ({}) in all; the largest: {}",
                    head.sites.len(),
                    head.live_count,
                    fmt_bytes(head.live_bytes),
                    members[0].reason
                );
            }
            head
        })
        .collect();
    out.sort_by(report_order);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::account::live::tests::{alloc, free};
    use crate::account::live::{Op, State};
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
    fn suspects_with_one_headline_and_kind_are_one_group() {
        let sus = |site: u32, mib: u64, score: f64| Suspect {
            site,
            score,
            reason: format!("r{site}"),
            live_bytes: mib * MIB,
            live_count: mib,
            sites: vec![site],
            ..Suspect::default()
        };
        // Sites 1, 2 and 4 share a line (4 is the largest); 3 is another line; 5 has no
        // headline; 6 shares the line of 1 but is another kind.
        let key = |site: u32| match site {
            1 | 2 | 4 => Some("user f a.c:7 device".to_string()),
            3 => Some("user g a.c:9 device".to_string()),
            6 => Some("user f a.c:7 pinned_host".to_string()),
            _ => None,
        };
        let got = group(
            vec![sus(1, 10, 1.0), sus(2, 5, 0.9), sus(3, 40, 0.8), sus(4, 20, 0.7), sus(5, 1, 0.5), sus(6, 1, 0.5)],
            key,
        );
        let shape: Vec<(u32, Vec<u32>, u64, u64, f64)> =
            got.iter().map(|s| (s.site, s.sites.clone(), s.live_bytes / MIB, s.live_count, s.score)).collect();
        assert_eq!(
            shape,
            vec![
                (3, vec![3], 40, 40, 0.8),
                (4, vec![4, 1, 2], 35, 35, 1.0),
                (5, vec![5], 1, 1, 0.5),
                (6, vec![6], 1, 1, 0.5),
            ]
        );
        assert_eq!(got[1].reason, "3 sites, 35 live (35.0 MiB) in all; the largest: r4");
        assert_eq!(got[0].reason, "r3");
    }

    #[test]
    fn nothing_in_an_empty_or_instant_run() {
        let s = State::default();
        assert!(suspects(&s, 0, 0).is_empty());
    }

    /// S1's shape (docs/gpu-matrix.md): 5.5 s of start-up, then a caching-allocator site
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
            if let crate::account::live::Op::Alloc(a) = &mut op {
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
            got[0].reason.ends_with("30 live (30.0 MiB) until a context teardown freed them, the program freed none"),
            "{}",
            got[0].reason
        );
    }

    /// A working set made again every step: three gradients allocated in each step's backward
    /// and freed at the next step's start, 30 steps of 3 ms; at the end the last step's three
    /// are live. Not growth, though they are the latest allocations (the run ends when the
    /// program's work does). Keeping one more gradient each step is.
    #[test]
    fn a_working_set_freed_and_made_every_step_is_not_a_suspect() {
        let addr = |step: u64, k: u64| 0x1000_0000 + (step % 2) * 0x100_0000 + k * 0x10_0000;
        let mut ops = Vec::new();
        for step in 0..30u64 {
            let t = step * 3 * MS;
            if step > 0 {
                for k in 0..3 {
                    ops.push(free(0, t + k, addr(step - 1, k), 0));
                }
            }
            for k in 0..3 {
                ops.push(alloc(0, t + 2 * MS + k, addr(step, k), 2 * MIB, Kind::Device, 0, 1));
            }
        }
        let end = 30 * 3 * MS;
        let s = state_of(ops);
        assert_eq!(s.totals.gauge.live_count, 3);
        assert!(suspects(&s, 0, end).is_empty(), "{:#?}", suspects(&s, 0, end));
        // One of each step's three kept instead: growth.
        let mut ops = Vec::new();
        for step in 0..30u64 {
            let t = step * 3 * MS;
            if step > 0 {
                for k in 0..2 {
                    ops.push(free(0, t + k, 0x1000_0000 + ((step - 1) % 2) * 0x100_0000 + k * 0x10_0000, 0));
                }
            }
            for k in 0..2 {
                ops.push(alloc(
                    0,
                    t + 2 * MS + k,
                    0x1000_0000 + (step % 2) * 0x100_0000 + k * 0x10_0000,
                    2 * MIB,
                    Kind::Device,
                    0,
                    1,
                ));
            }
            ops.push(alloc(0, t + 2 * MS + 2, 0x9_0000_0000 + step * 0x10_0000, 2 * MIB, Kind::Device, 0, 1));
        }
        let s = state_of(ops);
        assert_eq!(suspects(&s, 0, end).iter().map(|x| (x.site, x.live_count)).collect::<Vec<_>>(), vec![(1, 32)]);
    }

    /// A warm-up (8 buffers in the first 40 ms, then 1.5 s of use) is no suspect, and is the
    /// growth that held still; a leak growing until the end is not one.
    #[test]
    fn a_warm_up_is_the_growth_that_held_still() {
        let ops: Vec<Op> =
            (0..8u64).map(|i| alloc(0, i * 5 * MS, 0x1000_0000 + i * 0x10_0000, MIB, Kind::Device, 0, 3)).collect();
        let s = state_of(ops);
        let end = 1540 * MS;
        assert!(suspects(&s, 0, end).is_empty());
        let h = held_growth(&s, 0, end, &Hints::default()).expect("held growth");
        assert_eq!(
            (h.site, h.live_bytes, h.live_count, h.grew_ns, h.held_ns, h.pool),
            (3, 8 * MIB, 8, 35 * MS, 1505 * MS, false)
        );
        // The same 8 allocations spread until the end: growth, not held.
        let ops: Vec<Op> =
            (0..8u64).map(|i| alloc(0, i * 200 * MS, 0x1000_0000 + i * 0x10_0000, MIB, Kind::Device, 0, 3)).collect();
        let s = state_of(ops);
        assert_eq!(held_growth(&s, 0, 1450 * MS, &Hints::default()), None);
    }

    /// Applies `ops` (sorted by time, numbered in that order) to a fresh state.
    fn state_of(mut ops: Vec<Op>) -> State {
        ops.sort_by_key(|o| o.ts_ns());
        let mut s = State::default();
        for (seq, mut op) in ops.into_iter().enumerate() {
            op.set_seq(seq as u64);
            s.apply(&op);
        }
        s
    }

    /// Hints giving every site in `sites` the line `line`, and the pool flag to those in `pool`.
    fn hints(line: &str, sites: impl IntoIterator<Item = u32>, pool: &[u32]) -> Hints {
        Hints {
            line: sites.into_iter().map(|id| (id, line.to_string())).collect(),
            pool: pool.iter().copied().collect(),
            ..Hints::default()
        }
    }

    /// A run of 300 steps of the program's own work, one GPU call each, 10 µs apart: site 1
    /// fills a workspace cache of 4 sizes in the first 4 steps, site 2 keeps one buffer per
    /// step until step `until`.
    fn steps_run(until: u64) -> (State, Vec<(u64, u64)>) {
        let mut s = State::default();
        let mut ops = Vec::new();
        let mut activity = Vec::new();
        for i in 0..300u64 {
            let t = 1000 * MS + i * 10_000;
            if i < 4 {
                ops.push(alloc(0, t, 0x1000_0000 + i * 0x100_0000, (i + 1) * MIB, Kind::Device, 0, 1));
            }
            if i < until {
                ops.push(alloc(0, t + 1, 0x8000_0000 + i * 0x10_0000, MIB, Kind::Device, 0, 2));
            }
            activity.push((t + 2, i + 1));
        }
        for (seq, mut op) in ops.into_iter().enumerate() {
            op.set_seq(seq as u64);
            s.apply(&op);
        }
        (s, activity)
    }

    #[test]
    fn growth_then_the_programs_own_steps_without_growth_is_a_warm_up_however_fast() {
        // 4 allocations in the first 4 of 300 steps, 3 ms in all: by wall time the cache
        // grew over 30 µs and held 3 ms; the run's start-up (1 s) makes it recent.
        let end = 1000 * MS + 300 * 10_000;
        let (s, activity) = steps_run(0);
        let none = suspects_with(&s, 0, end, &Hints::default());
        assert_eq!(none.iter().map(|x| x.site).collect::<Vec<_>>(), vec![1], "without steps: {none:#?}");
        let h = Hints { activity: activity.clone(), ..Hints::default() };
        assert!(suspects_with(&s, 0, end, &h).is_empty());
        let held = held_growth(&s, 0, end, &h).expect("the cache held still");
        assert_eq!((held.site, held.live_count, held.steps), (1, 4, Some((3, 297))));
        // A buffer kept every step until the end is growth in steps as in time.
        let (s, activity) = steps_run(300);
        let h = Hints { activity, ..Hints::default() };
        let got = suspects_with(&s, 0, end, &h);
        assert_eq!(got.iter().map(|x| x.site).collect::<Vec<_>>(), vec![2], "{got:#?}");
        // One that stopped at step 200 of 300 held still for 100 steps after growing for 199.
        let (s, activity) = steps_run(200);
        let h = Hints { activity, ..Hints::default() };
        assert_eq!(suspects_with(&s, 0, end, &h).iter().map(|x| x.site).collect::<Vec<_>>(), vec![2]);
        assert!(!warmed_up(&h.activity, 1000 * MS, 1000 * MS + 199 * 10_000, 200));
        assert!(warmed_up(&h.activity, 1000 * MS, 1000 * MS + 99 * 10_000, 100));
    }

    /// The stack id of iteration `i` of the new-stream-per-iteration case: the caching
    /// allocator's segment requests change size as the pool grows, so the native stack changes
    /// every other iteration.
    fn stream_case_site(i: u64) -> u32 {
        100 + (i / 2) as u32
    }

    /// Issue 13, gap 3: a new CUDA stream per iteration and a small `nn.Linear` on it; cuBLAS
    /// keeps a ~32 MiB workspace per stream in PyTorch's pool, never freed. The model's weights
    /// come first (site 1, another line); 1 s of start-up passes before the loop (3 ms per
    /// iteration, about one segment in three iterations reused); the exit heap walk starts
    /// 2 ms after the loop and interpreter teardown takes 1.5 s more. Each native site holds at
    /// most a few segments; the union under `run_linear (leak.py:5)` is the suspect.
    fn stream_case(iters: u64) -> (State, Hints, u64, u64) {
        let mut ops = vec![alloc(0, 0, 0x10, 4 * MIB, Kind::Device, 0, 1)];
        let t0 = 1000 * MS;
        let mut sites = Vec::new();
        for i in (0..iters).filter(|i| iters <= 6 || i % 3 != 2) {
            let site = stream_case_site(i);
            sites.push(site);
            ops.push(alloc(0, t0 + i * 3 * MS, 0x1_0000_0000 + i * 0x400_0000, 32 * MIB, Kind::Device, 0, site));
        }
        let loop_end = t0 + iters * 3 * MS;
        let s = state_of(ops);
        let mut h = hints("run_linear /w/leak.py:5", sites, &[]);
        h.pool = h.line.keys().copied().collect();
        h.work_end_ns = Some(loop_end + 2 * MS);
        (s, h, 0, loop_end + 1500 * MS)
    }

    #[test]
    fn summed_series_is_the_sum_of_the_step_functions_at_every_point() {
        let mut a = crate::account::gauge::SiteSeries::default();
        let mut b = crate::account::gauge::SiteSeries::default();
        a.record(10, 5);
        a.record(30, 7);
        b.record(20, 100);
        b.record(30, 50);
        b.record(40, 0);
        assert_eq!(sum_series(&[&a, &b]), vec![(10, 5), (20, 105), (30, 57), (40, 7)]);
    }

    #[test]
    fn stream_case_is_one_suspect_over_the_sites_of_its_line_at_6_20_and_100_iterations() {
        for iters in [6u64, 20, 100] {
            let (s, h, start, end) = stream_case(iters);
            assert!(suspects(&s, start, end).is_empty(), "{iters}: the sites alone are no suspect");
            let got = suspects_with(&s, start, end, &h);
            assert_eq!(got.len(), 1, "{iters}: {got:#?}");
            let kept = if iters <= 6 { iters } else { (0..iters).filter(|i| i % 3 != 2).count() as u64 };
            assert_eq!((got[0].live_count, got[0].live_bytes), (kept, kept * 32 * MIB), "{iters}");
            let mut members: Vec<u32> = h.line.keys().copied().collect();
            members.sort_unstable();
            members.dedup();
            assert_eq!(got[0].line_sites, members, "{iters}");
            assert!(
                got[0].reason.contains(&format!(" across {} sites of one line, none freed", members.len())),
                "{}",
                got[0].reason
            );
            assert!(members.contains(&got[0].site));
        }
    }

    /// Short monotone growth (6 allocations in 30 ms) after 5 s of start-up, then a 1 s exit:
    /// still growing when the program's work ended (the exit heap walk), though not when the
    /// report was made.
    #[test]
    fn short_growth_after_a_long_start_up_then_a_slow_exit_is_a_suspect() {
        let mut ops = vec![alloc(0, 0, 0x10, MIB, Kind::Device, 0, 1)];
        for i in 0..6u64 {
            ops.push(alloc(0, 5000 * MS + i * 6 * MS, 0x1000_0000 + i * 0x100_0000, 8 * MIB, Kind::Device, 0, 2));
        }
        let s = state_of(ops);
        assert!(suspects(&s, 0, 6030 * MS).is_empty(), "no suspect before: the exit hides it");
        let h = Hints { work_end_ns: Some(5032 * MS), ..Hints::default() };
        let got = suspects_with(&s, 0, 6030 * MS, &h);
        assert_eq!(got.iter().map(|x| (x.site, x.live_bytes)).collect::<Vec<_>>(), vec![(2, 48 * MIB)]);
    }

    /// Issue 29, fast accumulation: 35 buffers put in a queue within 0.3 ms, then 3.5 ms of
    /// shutdown in a 20 ms run (a producer thread ahead of its consumer). By the clock it grew
    /// too briefly and too long ago; the exit heap walk's 35 objects in one container make it a
    /// suspect. Not when it was over in the run's first half (a warm-up's scratch dict filled
    /// early), nor when the program's own steps after it say it held.
    #[test]
    fn objects_accumulated_in_one_container_make_a_fast_growth_a_suspect() {
        let grow = |t0: u64| -> Vec<Op> {
            (0..35u64)
                .map(|i| alloc(0, t0 + i * 8_000, 0x1000_0000 + i * 0x10_0000, 64 * 1024, Kind::Device, 0, 2))
                .collect()
        };
        let mut ops = vec![alloc(0, 0, 0x10, MIB, Kind::Device, 0, 1)];
        ops.extend(grow(16 * MS));
        let s = state_of(ops);
        let end = 20 * MS;
        let heaped = Hints { accumulated: [(2, 35)].into(), ..Hints::default() };
        assert!(suspects_with(&s, 0, end, &Hints::default()).is_empty(), "by the clock alone: none");
        let got = suspects_with(&s, 0, end, &heaped);
        assert_eq!(got.iter().map(|x| (x.site, x.live_count)).collect::<Vec<_>>(), vec![(2, 35)]);
        assert!(
            got[0].reason.ends_with("none freed; accumulated in one container (the exit's heap walk)"),
            "{}",
            got[0].reason
        );
        // Fewer than MIN_ACCUMULATED objects in one container: no evidence.
        let few = Hints { accumulated: [(2, MIN_ACCUMULATED - 1)].into(), ..Hints::default() };
        assert!(suspects_with(&s, 0, end, &few).is_empty());
        // The same growth early in a longer run: a warm-up.
        let mut ops = vec![alloc(0, 0, 0x10, MIB, Kind::Device, 0, 1)];
        ops.extend(grow(MS));
        let s = state_of(ops);
        assert!(suspects_with(&s, 0, 1500 * MS, &heaped).is_empty());
        // Drained from a peak the kept objects never reached (a step's temporaries live beside
        // them for a moment): 35 kept, a peak of 50. By itself no suspect; accumulated, one.
        let mut ops = vec![alloc(0, 0, 0x10, MIB, Kind::Device, 0, 1)];
        ops.extend(
            (0..50u64)
                .map(|i| alloc(0, 10 * MS + i * MS / 10, 0x4000_0000 + i * 0x10_0000, 64 * 1024, Kind::Device, 0, 2)),
        );
        ops.extend((35..50u64).map(|i| free(0, 16 * MS, 0x4000_0000 + i * 0x10_0000, 0)));
        let s = state_of(ops);
        assert!(suspects_with(&s, 0, end, &Hints::default()).is_empty(), "live under 75% of its peak");
        assert_eq!(suspects_with(&s, 0, end, &heaped).len(), 1);
        // Late again, but the program made 400 GPU calls after it (35 during): it held.
        let mut ops = vec![alloc(0, 0, 0x10, MIB, Kind::Device, 0, 1)];
        ops.extend(grow(16 * MS));
        let s = state_of(ops);
        let activity = vec![(0, 0), (16 * MS, 10), (16 * MS + 280_000, 45), (20 * MS, 445)];
        let stepped = Hints { accumulated: [(2, 35)].into(), activity, ..Hints::default() };
        assert!(suspects_with(&s, 0, end, &stepped).is_empty());
    }

    /// A training loop's first step under one line, late in a run with a long start-up
    /// (docs/gpu-matrix.md, H_train): five stacks allocate once each, five different sizes, in a 0.6 ms
    /// burst at 93% of the run. An initialization, not growth; the same sizes repeated are.
    #[test]
    fn one_allocation_of_each_size_per_site_of_a_line_is_an_initialization() {
        let sizes = [1024, 128 * 1024, 64 * MIB, 32 * MIB, 2 * MIB];
        let at = |i: u64| 3650 * MS + i * MS / 8;
        let mut ops = vec![alloc(0, 0, 0x10, 20 * MIB, Kind::Device, 0, 1)];
        for (i, &size) in sizes.iter().enumerate() {
            let i = i as u64;
            ops.push(alloc(0, at(i), 0x1_0000_0000 + i * 0x1000_0000, size, Kind::Device, 0, 10 + i as u32));
        }
        let s = state_of(ops);
        let end = 3900 * MS;
        let h = hints("h_train_control /w/cases.py:539", 10..15, &[]);
        assert!(suspects_with(&s, 0, end, &h).is_empty());
        // The same burst with every allocation the same size is growth in the last tenth.
        let ops: Vec<Op> = std::iter::once(alloc(0, 0, 0x10, 20 * MIB, Kind::Device, 0, 1))
            .chain(
                (0..5u64)
                    .map(|i| alloc(0, at(i), 0x1_0000_0000 + i * 0x1000_0000, 8 * MIB, Kind::Device, 0, 10 + i as u32)),
            )
            .collect();
        let s = state_of(ops);
        assert_eq!(suspects_with(&s, 0, end, &h).len(), 1);
    }

    /// Three large allocations (2 GiB) from three native stacks under one line, over the run.
    #[test]
    fn few_large_allocations_of_one_line_are_a_suspect() {
        let ops: Vec<Op> = (0..3u64)
            .map(|i| {
                alloc(0, (100 + i * 300) * MS, 0x1_0000_0000 * (i + 1), 2048 * MIB, Kind::Device, 0, 10 + i as u32)
            })
            .collect();
        let s = state_of(ops);
        let end = 1000 * MS;
        assert!(suspects(&s, 0, end).is_empty());
        let got = suspects_with(&s, 0, end, &hints("step /w/t.py:9", [10, 11, 12], &[]));
        assert_eq!(got.len(), 1, "{got:#?}");
        assert_eq!(
            (got[0].live_count, got[0].live_bytes, got[0].line_sites.clone()),
            (3, 6144 * MIB, vec![10, 11, 12])
        );
    }

    /// Growth in the last tenth of a 10 s run: five 16 MiB blocks from five stacks of one line.
    #[test]
    fn growth_in_the_last_tenth_of_the_run_is_a_suspect() {
        let mut ops = vec![alloc(0, 0, 0x10, MIB, Kind::Device, 0, 1)];
        for i in 0..5u64 {
            ops.push(alloc(
                0,
                9200 * MS + i * 150 * MS,
                0x1000_0000 + i * 0x100_0000,
                16 * MIB,
                Kind::Device,
                0,
                20 + i as u32,
            ));
        }
        let s = state_of(ops);
        assert!(suspects(&s, 0, 10_000 * MS).is_empty());
        let got = suspects_with(&s, 0, 10_000 * MS, &hints("eval /w/t.py:40", 20..25, &[]));
        assert_eq!(got.iter().map(|x| (x.live_count, x.live_bytes)).collect::<Vec<_>>(), vec![(5, 80 * MIB)]);
    }

    /// Growth split over sites of two allocations each, under the same line as a larger
    /// steady site (a 1 GiB buffer made at the start and kept).
    #[test]
    fn growth_interleaved_with_a_larger_steady_site_of_the_same_line_is_a_suspect() {
        let mut ops = vec![alloc(0, 0, 0xf000_0000_0000, 1024 * MIB, Kind::Device, 0, 30)];
        for i in 0..20u64 {
            ops.push(alloc(
                0,
                (10 + i * 45) * MS,
                0x1000_0000 + i * 0x100_0000,
                4 * MIB,
                Kind::Device,
                0,
                31 + (i / 2) as u32,
            ));
        }
        let s = state_of(ops);
        assert!(suspects(&s, 0, 1000 * MS).is_empty());
        let got = suspects_with(&s, 0, 1000 * MS, &hints("step /w/t.py:9", 30..41, &[]));
        assert_eq!(got.len(), 1, "{got:#?}");
        assert_eq!((got[0].site, got[0].live_count, got[0].live_bytes), (30, 21, 1024 * MIB + 80 * MIB));
    }

    /// The negatives, each with all its sites under one line (so that the union is judged too)
    /// and, for pools, the pool flag; none is a suspect.
    #[test]
    fn negatives_stay_quiet_when_judged_by_line() {
        let end = 1000 * MS;
        // Warm-up burst: four stacks, two blocks each, in the first 20 ms; work goes on after.
        let mut ops: Vec<Op> = (0..8u64)
            .map(|i| {
                alloc(0, (1 + 2 * i) * MS, 0x1000_0000 + i * 0x100_0000, 20 * MIB, Kind::Device, 0, 40 + (i / 2) as u32)
            })
            .collect();
        for i in 0..50u64 {
            ops.push(alloc(0, (100 + i * 18) * MS, 0x9000_0000, MIB, Kind::Device, 0, 49));
            ops.push(free(0, (100 + i * 18) * MS + 1, 0x9000_0000, 0));
        }
        let s = state_of(ops);
        assert!(suspects_with(&s, 0, end, &hints("step /w/t.py:9", 40..50, &[40, 41, 42, 43])).is_empty());
        // A steady pool (one 4 GiB reservation) and a one-off cache (a handle's 3 buffers at its
        // first use), under one line.
        let mut ops = vec![alloc(0, MS, 0xa000_0000, 4096 * MIB, Kind::Device, 0, 50)];
        for i in 0..3u64 {
            ops.push(alloc(0, 300 * MS + i * MS / 4, 0xb000_0000 + i * 0x100_0000, 8 * MIB, Kind::Device, 0, 51));
        }
        ops.push(alloc(0, 999 * MS, 0xc000_0000, MIB, Kind::Device, 0, 52));
        ops.push(free(0, 999 * MS + 1, 0xc000_0000, 0));
        let s = state_of(ops);
        assert!(suspects_with(&s, 0, end, &hints("run /w/t.py:3", 50..53, &[50])).is_empty());
        // Numba's deferred frees: one array per 10 ms, freed ten at a time (saw-tooth), from
        // two stacks; the run ends after a flush.
        let mut ops = Vec::new();
        for i in 0..100u64 {
            ops.push(alloc(0, i * 10 * MS, 0x1000_0000 + i * 0x10_0000, MIB, Kind::Device, 0, 60 + (i % 2) as u32));
            if i % 10 == 9 {
                for j in i - 9..=i {
                    ops.push(free(0, i * 10 * MS + 5 * MS + j, 0x1000_0000 + j * 0x10_0000, 0));
                }
            }
        }
        let s = state_of(ops);
        assert!(suspects_with(&s, 0, end, &hints("step /w/t.py:9", [60, 61], &[])).is_empty());
        // A stream-ordered pool that keeps freed memory: every block freed (cudaFreeAsync).
        let mut ops = Vec::new();
        for i in 0..30u64 {
            ops.push(alloc(
                0,
                i * 30 * MS,
                0x2000_0000 + i * 0x100_0000,
                64 * MIB,
                Kind::Device,
                0,
                70 + (i % 3) as u32,
            ));
            ops.push(free(0, i * 30 * MS + 10 * MS, 0x2000_0000 + i * 0x100_0000, 0));
        }
        let s = state_of(ops);
        assert!(suspects_with(&s, 0, end, &hints("step /w/t.py:9", 70..73, &[70, 71, 72])).is_empty());
        // Pinned staging buffers made along the run, freed at the end.
        let mut ops = Vec::new();
        for i in 0..10u64 {
            ops.push(alloc(
                0,
                i * 90 * MS,
                0x3000_0000 + i * 0x10_0000,
                4 * MIB,
                Kind::PinnedHost,
                -1,
                80 + (i % 2) as u32,
            ));
        }
        for i in 0..10u64 {
            ops.push(free(0, 990 * MS + i, 0x3000_0000 + i * 0x10_0000, 0));
        }
        let s = state_of(ops);
        assert!(suspects_with(&s, 0, end, &hints("load /w/t.py:2", [80, 81], &[])).is_empty());
    }

    /// Issue 13's failing negative: a PyTorch Lightning `Trainer.fit` of two short epochs with
    /// `DataLoader(num_workers=2, pin_memory=True)`: PyTorch's pinned host caching allocator
    /// warms up to 10 blocks of 1 MiB on the pin-memory thread (`Thread.run`, no user line)
    /// during the first quarter of the fit, then reuses them. Owned by a pool: not a suspect.
    #[test]
    fn pinned_host_allocator_warming_up_is_not_a_suspect() {
        let mut ops = vec![alloc(0, 0, 0x10, 64 * MIB, Kind::Device, 0, 1)];
        for i in 0..10u64 {
            ops.push(alloc(0, 2000 * MS + i * 60 * MS, 0x7000_0000 + i * 0x10_0000, MIB, Kind::PinnedHost, -1, 90));
        }
        let s = state_of(ops);
        let (end, work_end) = (5000 * MS, 4800 * MS);
        assert_eq!(suspects(&s, 0, end).iter().map(|x| x.site).collect::<Vec<_>>(), vec![90], "the suspect before");
        let h = Hints { pool: [90].into_iter().collect(), work_end_ns: Some(work_end), ..Hints::default() };
        assert!(suspects_with(&s, 0, end, &h).is_empty());
    }
}
