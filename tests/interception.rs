//! Every way a program reaches the CUDA allocator, each allocation counted once, per kind and
//! per site, with arguments and results passed through unchanged.

use serde_json::Value;

use crate::util::*;

/// The `kinds` scenario of target.c: what must be live at exit, whatever the path.
fn assert_kinds(r: &Value, run: &Outcome) {
    assert_eq!(r["reason"], "exit", "{run}");
    assert_eq!(kind(r, "device", "live_bytes"), 14 * MIB + 10240, "{run}");
    assert_eq!(kind(r, "device", "live_count"), 4, "{run}");
    assert_eq!(kind(r, "managed", "live_bytes"), 2 * MIB, "{run}");
    assert_eq!(kind(r, "managed", "live_count"), 1, "{run}");
    assert_eq!(kind(r, "pinned_host", "live_bytes"), 4 * MIB, "{run}");
    assert_eq!(kind(r, "pinned_host", "live_count"), 1, "{run}");
    assert_eq!(total(r, "alloc_count"), 9, "{run}");
    assert_eq!(total(r, "free_count"), 3, "{run}");
    assert_eq!(total(r, "live_count"), 6, "{run}");
    assert_eq!(total(r, "live_bytes"), 20 * MIB + 10240, "{run}");
    assert_eq!(total(r, "peak_live_bytes"), 20 * MIB + 10240, "{run}");
    assert_eq!(total(r, "failed_count"), 0, "{run}");
    assert_eq!(total(r, "unknown_free_count"), 0, "{run}");
    // Each kept allocation is its own site, found by its allocating function.
    for (func, bytes) in [
        ("kinds_malloc_kept", 3 * MIB),
        ("kinds_managed_kept", 2 * MIB),
        ("kinds_host_kept", 4 * MIB),
        ("kinds_async_kept", 5 * MIB),
        ("kinds_pitch_kept", 10240),
        ("kinds_pool_kept", 6 * MIB),
    ] {
        let s = the_site(r, func, run);
        assert_eq!(s["live_bytes"].as_u64(), Some(bytes), "{func}{run}");
        assert_eq!(s["live_count"].as_u64(), Some(1), "{func}{run}");
    }
    let freed = the_site(r, "kinds_malloc_freed", run);
    assert_eq!(freed["live_bytes"].as_u64(), Some(0), "{run}");
    assert_eq!(freed["free_count"].as_u64(), Some(1), "{run}");
    assert_eq!(r["suspects"].as_array().map(Vec::len), Some(0), "no suspects in a program without growth{run}");
}

/// Runs the `kinds` scenario of `t` and checks what must be live at exit.
fn run_kinds(t: Target) -> (Outcome, Value) {
    let run = t.args(&["kinds"]).run();
    run.success();
    let r = run.report();
    assert_kinds(&r, &run);
    (run, r)
}

/// The one site of each function recorded exactly its API.
fn assert_apis(r: &Value, run: &Outcome, want: &[(&str, &str)]) {
    for (func, api) in want {
        let apis: Vec<&str> =
            the_site(r, func, run)["apis"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
        assert_eq!(apis, [*api], "{func}{run}");
    }
}

#[test]
fn dynamic_runtime_by_symbol_counts_each_kind_once() {
    let (run, r) = run_kinds(Target::new("target_dynamic", "kinds-dyn"));
    // The outermost call is the one recorded: cudaMalloc, not the cuMemAlloc_v2 inside it.
    assert_apis(
        &r,
        &run,
        &[
            ("kinds_malloc_kept", "cudaMalloc"),
            ("kinds_async_kept", "cudaMallocAsync"),
            ("kinds_pool_kept", "cudaMallocFromPoolAsync"),
            ("kinds_host_kept", "cudaMallocHost"),
        ],
    );
    // The program's own output is what it prints without the shim.
    let bare = Target::new("target_dynamic", "kinds-bare").args(&["kinds"]).preload(None).run();
    let lines =
        |s: &str| s.lines().map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" ")).collect::<Vec<_>>();
    assert_eq!(lines(&run.stdout), lines(&bare.stdout), "{run}{bare}");
}

#[test]
fn static_runtime_is_caught_through_cu_get_proc_address() {
    let (run, r) = run_kinds(Target::new("target_static", "kinds-static"));
    // The runtime lives inside the executable: only the driver calls it made through the
    // table it loaded with cuGetProcAddress can be seen.
    assert_apis(
        &r,
        &run,
        &[
            ("kinds_malloc_kept", "cuMemAlloc"),
            ("kinds_async_kept", "cuMemAllocAsync"),
            ("kinds_managed_kept", "cuMemAllocManaged"),
            ("kinds_host_kept", "cuMemAllocHost"),
        ],
    );
}

#[test]
fn malloc_3d_is_named_by_the_runtime_and_seen_below_a_static_one() {
    for (target, api) in [("target_dynamic", "cudaMalloc3D"), ("target_static", "cuMemAllocPitch")] {
        let run = Target::new(target, &format!("malloc3d-{target}")).args(&["malloc3d"]).run();
        run.success();
        let r = run.report();
        // pitch 1024 × 10 × 3 kept; 512 × 4 × 2 freed by cudaFree; the zero height failed.
        assert_eq!(kind(&r, "device", "live_bytes"), 30720, "{run}");
        assert_eq!(total(&r, "alloc_count"), 2, "{run}");
        assert_eq!(total(&r, "free_count"), 1, "{run}");
        assert_eq!(total(&r, "failed_count"), 1, "{run}");
        assert_eq!(the_site(&r, "malloc3d_freed", &run)["free_count"].as_u64(), Some(1), "{run}");
        assert_apis(&r, &run, &[("malloc3d_kept", api), ("malloc3d_freed", api)]);
    }
}

#[test]
fn driver_by_dlsym_handle_and_proc_address_keeps_abi_variants() {
    let run = Target::new("driver_dlsym", "dlsym").run();
    run.success();
    let r = run.report();
    assert_eq!(kind(&r, "device", "live_bytes"), 13 * MIB, "{run}");
    assert_eq!(kind(&r, "device", "live_count"), 4, "{run}");
    assert_eq!(kind(&r, "pinned_host", "live_bytes"), 5 * MIB, "{run}");
    assert_eq!(kind(&r, "pinned_host", "live_count"), 2, "{run}");
    assert_eq!(kind(&r, "managed", "live_bytes"), 3 * MIB, "{run}");
    assert_eq!(total(&r, "alloc_count"), 9, "{run}");
    assert_eq!(total(&r, "free_count"), 2, "{run}");
    // cuMemCreate on a host location is pinned host memory, on a device location device memory.
    let vmm = sites_with(&r, "vmm_create");
    assert_eq!(vmm.iter().map(|s| s["live_bytes"].as_u64().unwrap()).sum::<u64>(), 6 * MIB, "{run}");
    assert!(vmm.iter().any(|s| s["kind"] == "pinned_host" && s["live_bytes"] == 4 * MIB), "{run}");
    // The per-thread-default-stream variant asked for is the one that ran, and only once.
    assert!(run.stdout.contains("standin cuMemAllocAsync_ptsz=1 cuMemAlloc_v2=3 cuMemAlloc=0"), "{run}");
    assert_apis(&r, &run, &[("procaddr_async_ptsz_kept", "cuMemAllocAsync")]);
}

#[test]
fn another_rtld_next_interposer_beside_the_shim_does_not_recurse() {
    for order in ["shim-first", "shim-second"] {
        let (shim, other) = (shim().display().to_string(), standin("librtldnext.so").display().to_string());
        let preload = if order == "shim-first" { format!("{shim}:{other}") } else { format!("{other}:{shim}") };
        run_kinds(Target::new("target_dynamic", order).preload(Some(preload)));
    }
}

#[test]
fn null_out_pointers_unknown_frees_and_oom_pass_through() {
    let run = Target::new("target_dynamic", "errors").args(&["errors"]).env("STANDIN_DEVICE_BYTES", MIB).run();
    run.success();
    // The real results reach the program unchanged.
    for line in ["null-out 1", "unknown-free 1", "null-free 0", "oom 2"] {
        assert!(run.stdout.lines().any(|l| l == line), "missing {line:?}{run}");
    }
    let r = run.report();
    assert_eq!(total(&r, "live_bytes"), 512 * 1024, "{run}");
    assert_eq!(total(&r, "alloc_count"), 1, "{run}");
    assert_eq!(total(&r, "failed_count"), 2, "the NULL out-pointer and the OOM{run}");
    assert_eq!(total(&r, "unknown_free_count"), 1, "{run}");
    let failures = r["failures"].as_array().unwrap();
    assert!(failures.iter().any(|f| f["result"] == 2 && f["size"] == 2 * MIB), "{run}");
}

/// The program's own steps (kernel launches and memsets, counted by the shim) tell a warm-up
/// from a leak however fast the run: a workspace cache of four sizes filled in the first four
/// of 300 steps is no suspect, one buffer kept every step is. With the static runtime the
/// memsets reach the shim through the driver table (`cuGetProcAddress`), with the shared one
/// the same; the kernel launches through `dlsym` on libcuda.
#[test]
fn the_programs_own_steps_tell_a_fast_warm_up_from_a_leak() {
    for program in ["target_dynamic", "target_static"] {
        let warm = Target::new(program, &format!("steps-warm-{program}")).args(&["steps", "workspace", "300"]).run();
        warm.success();
        let r = warm.report();
        assert_eq!(r["suspects"].as_array().map(Vec::len), Some(0), "{program}: {r}{warm}");
        let held = &r["held_growth"];
        assert_eq!(held["live_count"], 4, "{program}: {held}{warm}");
        // 300 steps of two calls: the cache grew over its first 3 steps (6 calls, give or take
        // the call before the first allocation) and held for the other 297.
        let (grew, after) = (held["grew_calls"].as_u64().unwrap(), held["held_calls"].as_u64().unwrap());
        assert!(grew <= 8 && after >= 590, "{program}: {held}{warm}");
        assert!(warm.stderr.contains("GPU calls after): a warm-up or a cache filled once"), "{program}{warm}");

        let leak = Target::new(program, &format!("steps-leak-{program}")).args(&["steps", "leak", "300"]).run();
        leak.success();
        let r = leak.report();
        let suspects = r["suspects"].as_array().unwrap();
        assert_eq!(suspects.len(), 1, "{program}: {r}{leak}");
        assert_eq!(suspects[0]["live_count"], 300, "{program}{leak}");
        // (The static runtime's own frames are inside the executable: its headline is theirs.)
        let site = suspects[0]["site"].as_u64().unwrap();
        assert!(sites_with(&r, "steps_leak").iter().any(|s| s["id"] == site), "{program}{leak}");
    }
}
