//! Many threads allocating at once: exact totals, nothing lost, nothing double counted.

use crate::util::*;

#[test]
fn eight_threads_ten_thousand_pairs_each() {
    let run = Target::new("target_dynamic", "threads").args(&["threads", "8", "10000"]).run();
    run.success();
    let r = run.report();
    assert_eq!(total(&r, "alloc_count"), 80_000, "{run}");
    assert_eq!(total(&r, "free_count"), 80_000, "{run}");
    assert_eq!(total(&r, "live_bytes"), 0, "{run}");
    assert_eq!(total(&r, "unknown_free_count"), 0, "{run}");
    assert_eq!(total(&r, "replaced_count"), 0, "a free was applied after the reuse of its address{run}");
    assert!(total(&r, "peak_live_bytes") >= 4096 && total(&r, "peak_live_bytes") <= 8 * 4096, "{run}");
    let s = sites_with(&r, "thread_alloc_free");
    assert_eq!(s.iter().map(|s| s["alloc_count"].as_u64().unwrap()).sum::<u64>(), 80_000, "{run}");
}
