//! The cached unwinder gives the same stacks as libgcc's, frame for frame.

use crate::util::*;

fn stacks(unwind: &str, program: &str, args: &[&str]) -> Vec<Vec<String>> {
    let run = Target::new(program, &format!("unwind-{unwind}")).args(args).env("GPUSHIM_UNWIND", unwind).run();
    run.success();
    let r = run.report();
    let mut v: Vec<Vec<String>> = r["sites"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["frames"].as_array().unwrap().iter().map(|f| format!("{} {}", f["function"], f["offset"])).collect())
        .collect();
    v.sort();
    v
}

#[test]
fn cached_unwinder_matches_libgcc() {
    for (program, args) in
        [("target_dynamic", &["kinds"][..]), ("target_static", &["kinds"][..]), ("leak_example", &["20"][..])]
    {
        let fast = stacks("cached", program, args);
        let slow = stacks("libgcc", program, args);
        assert!(fast.iter().all(|s| s.len() >= 3), "{program}: {fast:#?}");
        assert_eq!(fast, slow, "{program}");
    }
}

/// Each site of a report as (frames, live bytes, live count, alloc count, alloc bytes, free
/// count), sorted: the ids are left out (they number stacks in the order first met).
fn sites_of(r: &serde_json::Value) -> Vec<(Vec<String>, [u64; 5])> {
    let mut v: Vec<_> = r["sites"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let frames = s["frames"].as_array().unwrap().iter().map(|f| format!("{} {}", f["function"], f["offset"]));
            let n = |k: &str| s[k].as_u64().unwrap();
            (frames.collect(), [n("live_bytes"), n("live_count"), n("alloc_count"), n("alloc_bytes"), n("free_count")])
        })
        .collect();
    v.sort();
    v
}

/// The reports of `target_dynamic paths N [fork]`, parent first, with `GPUSHIM_UNWIND_CACHE`
/// set to `cache`.
fn paths_reports(cache: &str, args: &[&str]) -> Vec<serde_json::Value> {
    let run = Target::new("target_dynamic", &format!("paths-cache-{cache}"))
        .args(args)
        .env("GPUSHIM_UNWIND_CACHE", cache)
        .run();
    run.success();
    let mut reports: Vec<_> = run.reports().into_values().collect();
    // The parent made twice the child's allocations (two threads).
    reports.sort_by_key(|r| std::cmp::Reverse(total(r, "alloc_count")));
    reports
}

/// Issue 18: the hot path's per-thread caches (the unwinder's memo of rules, each thread's
/// previous stack) leave every site's frames and totals as they are without them, for
/// allocations from many call paths on two threads, including the same inner frames at the
/// same depth under different outer callers; and in a forked child, whose first allocation
/// has the forking thread's previous stack (a stale "same stack" there would leave the child's
/// allocations without frames).
#[test]
fn per_thread_caches_leave_stacks_and_totals_unchanged() {
    let n: u64 = 700;
    for args in [&["paths", "700"][..], &["paths", "700", "fork"][..]] {
        let on = paths_reports("1", args);
        let off = paths_reports("0", args);
        assert_eq!(on.len(), args.len() - 1, "{args:?}: one report per process");
        assert_eq!(off.len(), on.len(), "{args:?}");
        for (i, (a, b)) in on.iter().zip(&off).enumerate() {
            let (sa, sb) = (sites_of(a), sites_of(b));
            assert_eq!(sa, sb, "{args:?}, report {i}: the same sites with the caches on and off");
            // The paths are told apart: outer_a and outer_b through cudaMalloc and
            // cudaMallocAsync, and the deep path at four depths, twice (cudaMalloc, async).
            // With "fork", one more site and 4 KiB in each process (the fork's call site).
            let threads: u64 = if i == 0 { 2 } else { 1 };
            let fork = u64::from(args.len() == 3);
            assert_eq!(sa.len() as u64, 12 * threads + fork, "{args:?}, report {i}: {sa:#?}");
            assert!(sa.iter().all(|(f, _)| f.iter().any(|f| f.contains("paths_leaf"))), "{args:?}: {sa:#?}");
            let per_thread: u64 = (0..n).map(|i| 4096 * (i % 7 + 1)).sum();
            assert_eq!(total(a, "alloc_bytes"), per_thread * threads + 4096 * fork, "{args:?}, report {i}");
            assert_eq!(total(a, "alloc_count"), n * threads + fork, "{args:?}, report {i}");
        }
    }
}

/// Two callers whose stack frames add up to the same size reach one allocation site with the
/// hook at the same stack pointer and the same return addresses above the middle frame; only
/// that frame's saved frame pointer differs (`target_dynamic alloca-paths`: 6 calls through
/// `alloca_outer_a`, 2 through `alloca_outer_b`). Each call gets its own caller's stack with the
/// caches on, as with them off (the one-pass check of the previous walk's slots, since
/// removed, reported 3 and 5).
#[test]
fn same_stack_pointer_under_different_callers_keeps_each_callers_stack() {
    for cache in ["1", "0"] {
        let run = Target::new("target_dynamic", &format!("alloca-paths-{cache}"))
            .args(&["alloca-paths"])
            .env("GPUSHIM_UNWIND_CACHE", cache)
            .run();
        run.success();
        let reports: Vec<_> = run.reports().into_values().collect();
        assert_eq!(reports.len(), 1, "cache {cache}");
        let mut counts: Vec<(String, u64)> = sites_of(&reports[0])
            .into_iter()
            .map(|(frames, t)| {
                let outer = frames.iter().find(|f| f.contains("alloca_outer_")).cloned().unwrap_or_default();
                (outer, t[2])
            })
            .collect();
        counts.sort();
        let names: Vec<(bool, u64)> = counts.iter().map(|(f, n)| (f.contains("alloca_outer_a"), *n)).collect();
        assert_eq!(names, [(true, 6), (false, 2)], "cache {cache}: {counts:?}");
    }
}
