//! The reachability scan (shim/src/reach.rs, collector/src/explain/reach.rs): which live allocations no
//! pointer in the program's memory refers to any more. Each scenario of tests/programs/reach.c
//! runs to a normal exit under the shim; the final report's classes and counts are exact.
//!
//! The stand-in driver backs device memory with its own mappings here (`STANDIN_DEVICE_VA`), away
//! from the host heap, as a GPU's virtual addresses are: with device memory inside the host heap
//! every stale heap address would look like a device pointer.

use serde_json::Value;

use crate::util::*;

const KIB: u64 = 1024;

/// Runs `reach <scenario>` (with `env`) to its end and returns its final report and stderr.
fn reach(scenario: &str, env: &[(&str, &str)]) -> (Value, Done) {
    let mut t = Target::new("reach", scenario).args(&[scenario]).env("STANDIN_DEVICE_VA", "1");
    for (k, v) in env {
        t = t.env(k, v);
    }
    let d = run_bounded(&t);
    assert!(d.status.success(), "{d}");
    assert_eq!(d.stdout.last().map(String::as_str), Some("ok"), "{d}");
    let r = d.report_in(t.dir.path());
    (r, d)
}

fn scan(r: &Value) -> &Value {
    &r["reachability"]
}

fn n(v: &Value, field: &str) -> u64 {
    v[field].as_u64().unwrap_or_else(|| panic!("no {field} in {v}"))
}

/// (definitely lost, indirectly lost, reachable) of the whole scan.
fn classes(r: &Value) -> (u64, u64, u64) {
    let s = scan(r);
    (n(s, "definitely_lost_count"), n(s, "indirectly_lost_count"), n(s, "reachable_count"))
}

#[test]
fn a_pointer_overwritten_in_a_loop_leaves_all_but_the_last_definitely_lost() {
    let (r, d) = reach("overwrite", &[]);
    assert_eq!(scan(&r)["status"], "complete", "{d}");
    assert_eq!(classes(&r), (4, 0, 1), "{d}");
    assert_eq!(n(scan(&r), "definitely_lost_bytes"), 4 * 8 * KIB, "{d}");
    let site = the_site(&r, "overwrite_in_loop", &d);
    assert_eq!(n(&site["reach"], "definitely_lost_count"), 4, "{d}");
    assert_eq!(n(&site["reach"], "definitely_lost_bytes"), 32 * KIB, "{d}");
    assert_eq!(n(&site["reach"], "scanned_count"), 5, "{d}");
    // When timing makes the site a growth suspect (rank.rs), its reason leads with the lost ones
    // (the ranking itself: collector reach::tests).
    if let Some(s) = r["suspects"].as_array().unwrap().iter().find(|s| s["site"] == site["id"]) {
        let reason = s["reason"].as_str().unwrap();
        assert!(reason.starts_with("4 of 5 allocations definitely lost (no pointer left); "), "{d}");
        assert_eq!(n(s, "definitely_lost_bytes"), 32 * KIB, "{d}");
    }
    // The summary leads with the lost bytes.
    let first = d.stderr.lines().find(|l| l.starts_with("gpushim: pid")).unwrap_or_default();
    assert!(
        first.ends_with("definitely lost: 32.0 KiB in 4 allocations (no pointer left in the program's memory)"),
        "{d}"
    );
    // The last one is held by the program's global.
    assert_eq!(r["reachability"]["most_referenced"][0]["from"], "data of reach (last_kept)", "{d}");
}

#[test]
fn the_verdict_does_not_depend_on_the_length_of_the_shims_path() {
    // The loader keeps the preloaded library's path in the heap, so its length moves every block
    // after it. The shim's own thread-local storage (Rust's list of thread-local destructors, the
    // shim's caches) reaches heap blocks of the shim that keep stale words; read as the
    // program's, at some lengths one of them pointed at the stand-in driver's record of an
    // allocation and made it "possibly lost" (a checkout at /check/work/main: 3 lost instead of
    // 4, in 15 of 64 lengths here). Lengths 1 to 64 in steps of 7 cover any such window of 7.
    let links = TempDir::new("shim-path");
    for len in (1..=64).step_by(7) {
        let dir = links.path().join("d".repeat(len));
        std::fs::create_dir(&dir).unwrap();
        let shim_at = dir.join("libgpushim.so");
        std::os::unix::fs::symlink(shim(), &shim_at).unwrap();
        for (scenario, want) in [("overwrite", (4, 0, 1)), ("device-only", (1, 0, 1))] {
            let t = Target::new("reach", scenario)
                .args(&[scenario])
                .env("STANDIN_DEVICE_VA", "1")
                .preload(Some(shim_at.display().to_string()));
            let d = run_bounded(&t);
            assert!(d.status.success(), "{d}");
            let r = d.report_in(t.dir.path());
            assert_eq!(lost_possibly_reachable(&r), want, "path length {len}: {d}");
        }
    }
}

#[test]
fn the_cuda_libraries_own_records_make_every_allocation_reachable_when_read_as_roots() {
    // The stand-in driver keeps a malloc'd record of each allocation, reached from its data, as
    // the real driver does: read as the program's roots, they hold a word for every allocation,
    // and the 4 lost of the overwrite scenario come out reachable.
    let (r, d) = reach("overwrite", &[("GPUSHIM_REACHABILITY_CUDA_DATA", "1")]);
    assert_eq!(scan(&r)["status"], "complete", "{d}");
    assert_eq!(classes(&r), (0, 0, 5), "{d}");
}

#[test]
fn pointers_kept_in_a_global_array_are_reachable_from_its_data() {
    let (r, d) = reach("global", &[]);
    assert_eq!(classes(&r), (0, 0, 4), "{d}");
    let held = scan(&r)["most_referenced"].as_array().unwrap();
    assert_eq!(held.len(), 4, "{d}");
    assert!(held.iter().all(|h| h["from"] == "data of reach (held)" && h["interior"] == false), "{d}");
    assert!(r["suspects"].as_array().unwrap().iter().all(|s| s.get("definitely_lost_count").is_none()), "{d}");
}

#[test]
fn a_pointer_only_in_a_dropped_heap_block_is_indirectly_lost() {
    let (r, d) = reach("heap-struct", &[]);
    assert_eq!(classes(&r), (0, 1, 0), "{d}");
    assert_eq!(n(scan(&r), "indirectly_lost_bytes"), 8 * KIB, "{d}");
}

#[test]
fn pointers_left_in_freed_heap_blocks_do_not_count_as_references() {
    // 7 of the 12 blocks go to the thread's cache, 5 to the main arena's fastbins; a freed
    // block's chunk still looks in use in both, and its stale words are not references.
    let (r, d) = reach("freed-small-blocks", &[]);
    assert_eq!(scan(&r)["status"], "complete", "{d}");
    // The exit's scan is made when `main` returns, before the program's exit handlers: freed
    // blocks are not read then, and all 12 are definitely lost.
    assert_eq!(lost_possibly_reachable(&r), (12, 0, 0), "{d}");
    assert_eq!(classes(&r).1, 0, "{d}");
    // glibc's main arena, whose fastbins list the freed blocks, was found.
    assert!(!scan(&r)["note"].as_str().unwrap_or("").contains("main arena was not found"), "{d}");
}

#[test]
fn a_pointer_on_a_sleeping_threads_stack_is_reachable_from_that_stack() {
    let (r, d) = reach("thread-stack", &[]);
    assert_eq!(classes(&r), (0, 0, 1), "{d}");
    let from = scan(&r)["most_referenced"][0]["from"].as_str().unwrap().to_string();
    let pid = r["pid"].as_u64().unwrap();
    assert!(from.starts_with("stack of thread ") && from != format!("stack of thread {pid}"), "{from}: {d}");
}

#[test]
fn an_interior_pointer_keeps_an_allocation_reachable_and_is_reported_as_interior() {
    let (r, d) = reach("interior", &[]);
    assert_eq!(classes(&r), (0, 0, 1), "{d}");
    assert_eq!(n(scan(&r), "interior_count"), 1, "{d}");
    let h = &scan(&r)["most_referenced"][0];
    assert_eq!(h["interior"], true, "{d}");
    assert_eq!(h["size"], 16 * KIB, "{d}");
    assert_eq!(h["from"], "data of reach (interior_kept)", "{d}");
}

#[test]
fn a_xor_hidden_pointer_is_lost_a_documented_limitation() {
    let (r, d) = reach("xor", &[]);
    assert_eq!(classes(&r), (1, 0, 0), "{d}");
}

#[test]
fn a_pointer_kept_only_in_device_memory_is_lost_a_documented_limitation() {
    let (r, d) = reach("device-only", &[]);
    assert_eq!(classes(&r), (1, 0, 1), "{d}");
    assert_eq!(scan(&r)["most_referenced"][0]["from"], "data of reach (device_holder)", "{d}");
}

#[test]
fn a_scan_cut_by_its_time_cap_says_so_and_calls_nothing_lost() {
    let (r, d) = reach("large-heap", &[("GPUSHIM_REACHABILITY_MS", "0")]);
    let s = scan(&r);
    assert_eq!(s["status"], "cut", "{d}");
    assert_eq!(classes(&r), (0, 0, 0), "{d}");
    assert_eq!(n(s, "unknown_count"), 6, "{d}");
    assert!(s["note"].as_str().unwrap().contains("cut at its cap of 0 ms (GPUSHIM_REACHABILITY_MS)"), "{d}");
    assert!(d.stderr.contains("gpushim: reachability scan cut: 0 lost"), "{d}");
}

#[test]
fn a_large_heap_is_scanned_whole_within_its_cap() {
    // The tests' shim is an unoptimized build: a minute is ample for 64 MiB.
    let (r, d) = reach("large-heap", &[("GPUSHIM_REACHABILITY_MS", "60000")]);
    let s = scan(&r);
    assert_eq!(s["status"], "complete", "{d}");
    // 3 kept in the global array: reachable. 3 dropped: lost, each definitely or, where a stale
    // copy lies in memory the scan reads without trust (the freed blocks it reads at exit),
    // possibly; never more definitely lost than the truth (a new user's run under load gave
    // 3 possibly lost).
    let (lost, indirect, reachable) = classes(&r);
    assert_eq!((indirect, reachable), (0, 3), "{d}");
    assert!(lost <= 3 && lost + n(s, "possibly_lost_count") == 3, "{d}");
    assert!(n(s, "scanned_bytes") >= 64 * MIB, "{d}");
}

#[test]
fn pointers_spread_over_many_mappings_are_found_by_any_number_of_threads_reading_only_touched_pages() {
    // reach.c's `spread`: 16 mappings of 32 MiB with one touched page each, a device pointer and
    // a heap block holding another in it; 8 allocations dropped.
    for threads in ["1", "2", "4"] {
        let (r, d) = reach("spread", &[("GPUSHIM_REACHABILITY_THREADS", threads)]);
        let s = scan(&r);
        assert_eq!(s["status"], "complete", "{threads} threads: {d}");
        assert_eq!(classes(&r), (8, 0, 32), "{threads} threads: {d}");
        // The untouched pages of the 512 MiB are not read (both passes together).
        assert!(n(s, "scanned_bytes") < 128 * MIB, "{threads} threads: {} bytes read: {d}", n(s, "scanned_bytes"));
    }
}

/// A Python program that keeps its device pointers only as Python ints (as cuda-python's
/// `cudaMalloc` hands them out, and ctypes users keep `p.value`): CPython stores an int of 31 to
/// 60 bits as two 30-bit digits, so no word of its memory holds the address as such.
const INTS_PY: &str = r#"import ctypes
import sys

cudart = ctypes.CDLL(sys.argv[1])
cudart.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
kept = []


def alloc():
    p = ctypes.c_void_p()
    if cudart.cudaMalloc(ctypes.byref(p), 8192) != 0:
        raise SystemExit("cudaMalloc failed")
    return p.value


for _ in range(20):
    kept.append(alloc())
# The ctypes objects that held the raw pointers are gone; their memory may be reused.
junk = [ctypes.c_void_p(0) for _ in range(1000)]
print("ok")
"#;

#[test]
fn device_pointers_kept_as_python_ints_are_reachable() {
    let t = Target::new(crate::python::python3(), "reach-ints").env("STANDIN_DEVICE_VA", "1");
    let script = t.dir.path().join("ints.py");
    std::fs::write(&script, INTS_PY).unwrap();
    let cudart = standin("libcudart.so.13");
    let t = t.args(&[script.to_str().unwrap(), cudart.to_str().unwrap()]);
    let d = run_bounded(&t);
    assert!(d.status.success(), "{d}");
    let r = d.report_in(t.dir.path());
    assert_eq!(scan(&r)["status"], "complete", "{d}");
    // Every one of the 20 is held by the list's ints: none is definitely lost.
    assert_eq!(classes(&r).0, 0, "{d}");
    assert_eq!(classes(&r).2, 20, "{d}");
}

#[test]
fn pointers_in_shared_anonymous_memory_are_read() {
    // reach.c's `shared-anon`: 3 kept only in a MAP_SHARED | MAP_ANONYMOUS mapping, listed as
    // "/dev/zero (deleted)", 2 dropped.
    let (r, d) = reach("shared-anon", &[]);
    assert_eq!(scan(&r)["status"], "complete", "{d}");
    assert_eq!(classes(&r), (2, 0, 3), "{d}");
}

#[test]
fn a_block_the_program_mallocs_after_the_shim_started_is_the_programs() {
    // Blocks of 24 to 768 bytes, malloc'd after the first CUDA call and chained from a global,
    // each holding a device pointer: all 7 allocations reachable (with 24- and 64-byte blocks,
    // 1 came out lost: the shim's own memory held a stale copy of the block's address and
    // claimed it first).
    let (r, d) = reach("block-after-start", &[]);
    assert_eq!(scan(&r)["status"], "complete", "{d}");
    assert_eq!(classes(&r), (0, 0, 7), "{d}");
}

#[test]
fn with_nothing_live_no_memory_is_read() {
    // The exit does not wait for a read of the whole process when no word could matter.
    let (r, d) = reach("all-freed", &[]);
    let s = scan(&r);
    assert_eq!(s["status"], "complete", "{d}");
    assert_eq!((n(s, "scanned_bytes"), classes(&r)), (0, (0, 0, 0)), "{d}");
    assert_eq!(s["note"], "nothing was live: nothing to scan for", "{d}");
}

#[test]
fn reachability_scans_are_off_with_gpushim_reachability_0() {
    let (r, d) = reach("overwrite", &[("GPUSHIM_REACHABILITY", "0")]);
    assert!(r.get("reachability").is_none(), "{d}");
    assert!(!d.stderr.contains("definitely lost"), "{d}");
    // A value that is not a switch is said, and scans stay on.
    let (r, d) = reach("overwrite", &[("GPUSHIM_REACHABILITY", "2")]);
    assert!(d.stderr.contains("GPUSHIM_REACHABILITY=2 is not a switch (1, on, yes, true or 0, off, no, false); reachability scans stay on"), "{d}");
    assert_eq!(scan(&r)["status"], "complete", "{d}");
}

#[test]
fn an_out_of_memory_report_gets_its_scan_beside_it() {
    let t = Target::new("reach", "oom").args(&["oom"]).env("STANDIN_DEVICE_VA", "1").env("STANDIN_DEVICE_BYTES", 65536);
    let d = run_bounded(&t);
    assert!(d.status.success(), "{d}");
    let pid = d.report_in(t.dir.path())["pid"].as_u64().unwrap();
    let f = read_json(&t.dir.path().join(format!("gpushim-{pid}-oom-1.reach.json")), &d);
    let s = &f["reachability"];
    assert_eq!(s["status"], "complete", "{d}");
    assert_eq!((n(s, "definitely_lost_count"), n(s, "reachable_count")), (1, 1), "{d}");
    assert_eq!(n(s, "definitely_lost_bytes"), 8 * KIB, "{d}");
    // Two call sites, one allocation each: the first one's is lost.
    let sites = f["sites"].as_object().unwrap();
    let lost: Vec<u64> = sites.values().map(|v| n(v, "definitely_lost_count")).collect();
    assert_eq!(lost, [1, 0], "{d}");
    assert!(d.stderr.contains("definitely lost: 8.0 KiB in 1 allocation"), "{d}");
}

/// (definitely lost, possibly lost, reachable) of the whole scan.
fn lost_possibly_reachable(r: &Value) -> (u64, u64, u64) {
    let s = scan(r);
    (n(s, "definitely_lost_count"), n(s, "possibly_lost_count"), n(s, "reachable_count"))
}

#[test]
fn a_library_block_the_program_also_points_to_makes_possibly_lost_not_definitely() {
    // reach.c's `library-block`: 3 handles malloc'd by a library named as cuBLAS is, kept by its
    // data and by the program, each holding a device workspace; 2 of the program's dropped.
    // The library's blocks are its bookkeeping (not read as the program's), but one the program
    // points to is read without trust: 5 definitely lost before, 2 after.
    let (r, d) = reach("library-block", &[]);
    assert_eq!(scan(&r)["status"], "complete", "{d}");
    assert_eq!(lost_possibly_reachable(&r), (2, 3, 0), "{d}");
    assert_eq!(n(scan(&r), "possibly_lost_bytes"), 3 << 20, "{d}");
    assert!(d.stderr.contains(", 3 possibly lost, "), "{d}");
}

#[test]
fn a_static_table_torn_down_at_exit_is_read_before_its_teardown() {
    // reach.c's `static-table`: a tree of 6 nodes and an array of 16 pointers freed by an atexit
    // handler (as C++ static destructors do), the globals still pointing at them; 2 dropped.
    // The exit's scan is made when `main` returns, before the handler: the 22 the table holds
    // are reachable and the 2 dropped definitely lost (before the scan came at the end of
    // `main`, after the teardown, 20 were possibly lost and 4 definitely).
    let (r, d) = reach("static-table", &[]);
    assert_eq!(scan(&r)["status"], "complete", "{d}");
    assert_eq!(lost_possibly_reachable(&r), (2, 0, 22), "{d}");
}

#[test]
fn a_blocked_thread_on_a_stack_the_program_gave_it_leaves_the_memory_below_possibly_lost() {
    // reach.c's `custom-stack`: 3 pointers in a mapping the program gave a thread as its stack,
    // below the blocked thread's stack pointer; 1 dropped (4 definitely lost before).
    let (r, d) = reach("custom-stack", &[]);
    assert_eq!(scan(&r)["status"], "complete", "{d}");
    assert_eq!(lost_possibly_reachable(&r), (1, 3, 0), "{d}");
}

/// Memory a library made for its own state is never called definitely lost: with the stand-in
/// cuBLAS's handles moved out of the scan's sight (as the real one keeps part of a handle in
/// device memory), their 40 device and 20 pinned buffers are possibly lost, and a note says why.
#[test]
fn a_librarys_own_state_is_possibly_lost_never_definitely() {
    let run = Target::new("threads", "reach-cublas-hidden").args(&["cublas-hidden", "20"]).run();
    run.success();
    let r = run.report();
    let reach = &r["reachability"];
    assert_eq!(reach["status"], "complete", "{run}");
    assert_eq!(
        (reach["definitely_lost_count"].as_u64(), reach["indirectly_lost_count"].as_u64()),
        (Some(0), Some(0)),
        "{reach}{run}"
    );
    assert_eq!(reach["possibly_lost_count"], 60, "{reach}{run}");
    let note = reach["note"].as_str().unwrap_or_default();
    assert!(note.contains("60 allocations a library made for its own state"), "{note}{run}");
    assert!(!run.stderr.contains("definitely lost"), "{run}");
}
