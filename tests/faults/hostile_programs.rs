//! Programs that do what real programs do, which a preloaded tool must neither disturb nor
//! misreport (tests/programs/hostile.c, localrt.c, nocuda.c): fork handlers that take the
//! allocator's lock, a pipe whose EOF the program waits for, a server that takes SIGTERM with
//! `sigwait`, allocations on a coroutine's stack, frees in cleanup handlers, CUDA runtimes
//! loaded `RTLD_LOCAL` or into another link-map namespace, probing for CUDA without it, and a
//! free that blocks while a snapshot is asked for.

use std::io::Write;

use crate::util::*;

/// Runs `hostile <scenario>` under the shim to its end (bounded) and checks it succeeded.
fn hostile(scenario: &str) -> (Target, Done) {
    let t = Target::new("hostile", scenario).args(&[scenario]);
    let d = run_bounded(&t);
    assert!(d.status.success(), "{d}");
    assert_eq!(d.stdout.last().map(String::as_str), Some("ok"), "{d}");
    (t, d)
}

#[test]
fn starting_the_collector_runs_none_of_the_programs_fork_handlers() {
    // The allocator holds its lock around cudaMalloc and takes it in its fork prepare handler:
    // a fork() in the shim's first allocation deadlocked here (hung every time before the fix).
    let (t, d) = hostile("atfork-lock");
    let r = d.report_in(t.dir.path());
    assert_eq!(total(&r, "live_bytes"), MIB, "{d}");
    assert_eq!(sites_with(&r, "locked_alloc").len(), 1, "{d}");
}

#[test]
fn the_collector_keeps_none_of_the_programs_descriptors() {
    // The program closes its pipe's write end and reads to EOF: a copy kept open by the
    // collector made the read wait for ever.
    let (t, d) = hostile("pipe-eof");
    assert!(d.stdout.contains(&"read 0".to_string()), "{d}");
    assert_eq!(total(&d.report_in(t.dir.path()), "live_bytes"), MIB, "{d}");
}

#[test]
fn a_reader_of_the_programs_stdout_sees_eof_when_the_program_closes_it() {
    // `prog | reader`: the program closes its stdout and goes on; the collector, started with
    // the program's stdout, kept the pipe open and the reader saw EOF only at the program's exit.
    let t = Target::new("hostile", "stdout-eof").args(&["stdout-eof"]);
    let d = run_bounded(&t);
    assert!(d.stderr.contains("stdout-eof: the reader saw EOF"), "{d}");
    assert!(d.status.success(), "{d}");
    assert_eq!(total(&d.report_in(t.dir.path()), "live_bytes"), MIB, "{d}");
}

#[test]
fn a_snapshot_signal_the_program_inherited_as_ignored_stays_ignored() {
    // The shim installed its handler over SIG_IGN: a child the program then exec'd without the
    // shim had SIGUSR1's default action instead of the ignored one, and a SIGUSR1 killed it.
    let t = Target::new("hostile", "sigusr1-ignored").args(&["sigusr1-ignored"]);
    let mut cmd = t.command();
    // SAFETY: async-signal-safe calls only, between fork and exec.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            libc::signal(libc::SIGUSR1, libc::SIG_IGN);
            Ok(())
        });
    }
    let d = Live::spawn(cmd, t.describe()).finish();
    assert!(d.status.success(), "{d}");
    assert!(d.stdout.contains(&"SIGUSR1 still ignored".to_string()), "{d}");
    assert_eq!(total(&d.report_in(t.dir.path()), "live_bytes"), MIB, "{d}");
}

#[test]
fn a_signal_the_program_blocks_in_all_its_threads_is_never_taken_by_a_shim_thread() {
    // SIGTERM blocked in the program's thread and taken with sigwait: delivered to the shim's
    // writer thread instead, it killed the program (status 143) in most runs before the fix.
    // Whether it is delivered there depends on timing; that the shim's thread does not block it
    // does not.
    let (t, d) = hostile("sigwait");
    assert!(d.stdout.contains(&"other threads taking SIGTERM 0".to_string()), "{d}");
    assert!(d.stdout.contains(&format!("sigwait {}", libc::SIGTERM)), "{d}");
    assert_eq!(total(&d.report_in(t.dir.path()), "live_bytes"), MIB, "{d}");
}

#[test]
fn an_allocation_on_a_coroutine_stack_through_a_frame_with_a_stale_rbp_is_recorded() {
    // A coroutine stack mapped below the thread's stack, a frame without unwind information
    // whose rbp points into an unmapped page: the unwinder read it and crashed (SIGSEGV).
    let (t, d) = hostile("coroutine");
    assert!(d.stdout.contains(&"coroutine allocated".to_string()), "{d}");
    let r = d.report_in(t.dir.path());
    assert_eq!(total(&r, "live_bytes"), MIB, "{d}");
    assert_eq!(total(&r, "alloc_count"), 1, "{d}");
}

#[test]
fn frees_in_cleanup_handlers_and_destructors_registered_before_the_first_allocation_are_recorded() {
    // An atexit handler registered before the first allocation frees 4 x 16 MiB, the program's
    // destructor 8 MiB more: they ran after the stream had ended, and the report showed 72 MiB
    // live and a suspect.
    let (t, d) = hostile("atexit-free");
    let r = d.report_in(t.dir.path());
    assert_eq!(r["reason"], "exit", "{d}");
    assert_eq!(total(&r, "live_bytes"), 0, "{d}");
    assert_eq!(total(&r, "free_count"), 5, "{d}");
    assert_eq!(total(&r, "peak_live_bytes"), 72 * MIB, "{d}");
    assert_eq!(r["suspects"].as_array().map(Vec::len), Some(0), "{d}");
}

#[test]
fn a_runtime_loaded_rtld_local_is_found_without_calling_the_loader_inside_dl_iterate_phdr() {
    // A dlopen inside dl_iterate_phdr takes the loader's locks in the order opposite to a
    // concurrent dlopen (a hang, 10 in 150 runs with a dlopen loop beside the first
    // cudaMalloc). A preloaded spy reports any such call deterministically.
    let spy = standin("libloaderspy.so");
    let t = Target::new("localrt", "localrt").preload(Some(format!("{} {}", shim().display(), spy.display())));
    let d = run_bounded(&t);
    assert!(d.status.success(), "{d}");
    assert!(!d.stderr.contains("loaderspy:"), "a loader call inside dl_iterate_phdr{d}");
    let r = d.report_in(t.dir.path());
    assert_eq!(total(&r, "live_bytes"), MIB, "the allocation through the local runtime is recorded{d}");
}

#[test]
fn a_runtime_in_another_link_map_namespace_is_left_unwrapped_and_may_be_closed() {
    // A second copy of the runtime, dlmopen'ed into a new namespace, used through dlsym and
    // closed; then the program's own cudaMalloc. The shim cannot keep that copy loaded, so it
    // does not wrap it; before the fix its address stayed in the shim's slot and the next
    // cudaMalloc jumped into the closed library (SIGSEGV).
    let (t, d) = hostile("dlmopen");
    let r = d.report_in(t.dir.path());
    assert_eq!(total(&r, "alloc_count"), 2, "only the program's own two allocations are seen{d}");
    assert_eq!(total(&r, "live_bytes"), 2 * MIB, "{d}");
    assert_eq!(sites_with(&r, "own_alloc").len(), 2, "one site per call of own_alloc{d}");
}

#[test]
fn two_rtld_local_libraries_each_reach_their_own_runtime() {
    // libcudauser.so links libcudart.so.13, libcudauser12.so libcudart.so.12; both are loaded
    // RTLD_LOCAL and no runtime is in the global scope. The shim had one real function per name:
    // both libraries' calls ran whichever runtime it found first (runtime13 served all four).
    let served = ["runtime13 cudaMalloc=1 cudaFree=0", "runtime12 cudaMalloc=2 cudaFree=1", "ok"];
    assert_eq!(plain_stdout("localrt", &["two"]), served, "without the shim");
    for backtrace in ["1", "0"] {
        let t = Target::new("localrt", "two-runtimes").args(&["two"]).env("GPUSHIM_BACKTRACE", backtrace);
        let d = run_bounded(&t);
        assert!(d.status.success(), "{d}");
        assert_eq!(d.stdout, served, "each call served by the runtime its library links{d}");
        let r = d.report_in(t.dir.path());
        assert_eq!(total(&r, "alloc_count"), 3, "each allocation recorded once{d}");
        assert_eq!(total(&r, "free_count"), 1, "{d}");
        assert_eq!(total(&r, "live_bytes"), 3 * MIB, "{d}");
        assert_eq!(total(&r, "peak_live_bytes"), 7 * MIB, "{d}");
    }
}

#[test]
fn a_pointer_from_dlsym_on_a_second_runtime_runs_it_and_the_programs_own_calls_keep_their_runtime() {
    // The program links libcudart.so.13; it loads libcudart.so.12 beside it, through a library
    // (RTLD_LOCAL) and through dlsym. Before: the library's calls ran runtime 13 (the one slot),
    // and after the dlsym the program's own cudaMalloc ran runtime 12.
    let served = ["runtime13 cudaMalloc=3 cudaFree=0", "runtime12 cudaMalloc=2 cudaFree=1", "ok"];
    assert_eq!(plain_stdout("hostile", &["two-runtimes"]), served, "without the shim");
    let (t, d) = hostile("two-runtimes");
    assert_eq!(d.stdout, served, "each call served by the runtime it reaches without the shim{d}");
    let r = d.report_in(t.dir.path());
    assert_eq!(total(&r, "alloc_count"), 5, "each allocation recorded once{d}");
    assert_eq!(total(&r, "free_count"), 1, "{d}");
    assert_eq!(total(&r, "live_bytes"), 29 * MIB, "{d}");
    assert_eq!(sites_with(&r, "own_alloc_13").len(), 2, "the program's own two calls{d}");
}

#[test]
fn a_program_without_cuda_finds_no_cuda_through_dlsym() {
    let plain = plain_stdout("nocuda", &[]);
    assert_eq!(plain, ["dlsym null", "cuMemAlloc_v2 null", "weak null", "ok"]);
    let t = Target::new("nocuda", "nocuda");
    let d = run_bounded(&t);
    assert!(d.status.success(), "{d}");
    // An RTLD_DEFAULT lookup fails as without the shim: a program probing for CUDA keeps its
    // CPU path. A weak reference is bound by the loader before any code of the shim runs: it
    // finds the shim's export, whose call fails with 3 (cudaErrorInitializationError) because
    // no CUDA library is there (the documented limit, docs/guarantees.md).
    assert_eq!(d.stdout, ["dlsym null", "cuMemAlloc_v2 null", "weak bound 3", "ok"], "{d}");
    assert_eq!(d.stderr, "", "{d}");
    assert!(names_in(t.dir.path()).is_empty(), "no collector, no report{d}");
}

#[test]
fn a_snapshot_does_not_wait_for_a_free_blocked_in_its_call() {
    // cudaFree waits for the device; a snapshot asked for meanwhile waited for it (3.7 s behind
    // a long kernel on the H200; for ever behind a hung one). The stand-in's free of the 7 MiB
    // block waits until the test writes to a FIFO.
    let dir = TempDir::new("slow-free-fifo");
    let fifo = dir.path().join("device");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo reads a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let t = Target::new("hostile", "slow-free")
        .args(&["slow-free"])
        .env("STANDIN_SLOW_FREE_BYTES", 7 * MIB)
        .env("STANDIN_SLOW_FREE_FIFO", fifo.display());
    let mut live = Live::start(&t);
    assert_eq!(live.line(), "ready");
    // The free is in its call once the program waits in open() of the FIFO.
    let deadline = std::time::Instant::now() + DEADLINE;
    while !asleep_in(live.pid, live.pid, libc::SYS_openat) {
        if std::time::Instant::now() > deadline {
            live.abort("the program never reached its blocking free");
        }
        std::thread::yield_now();
    }
    let path = take_snapshot(live.pid);
    let snap = read_json(std::path::Path::new(&path), &path);
    assert_eq!(total(&snap, "live_bytes"), 8 * MIB, "the memory being freed is still live: {snap}");
    assert_eq!(total(&snap, "free_count"), 0, "{snap}");
    std::fs::OpenOptions::new().write(true).open(&fifo).unwrap().write_all(b"x").unwrap();
    let d = live.finish();
    assert!(d.status.success(), "{d}");
    assert!(d.stdout.contains(&"freed".to_string()), "{d}");
    let r = d.report_in(t.dir.path());
    assert_eq!(total(&r, "live_bytes"), MIB, "{d}");
    assert_eq!(total(&r, "free_count"), 1, "{d}");
    assert_eq!(total(&r, "unknown_free_count"), 0, "{d}");
    assert!(r["notes"].as_array().is_none_or(|n| n.is_empty()), "no lost or duplicate events: {}", r["notes"]);
}

#[test]
fn cuda_arrays_count_as_device_memory_with_the_footprint_the_driver_reports() {
    // Arrays held device memory that no report showed (342 MiB of them on the H200). The
    // stand-in pads each array (each level of a mipmapped one) to 64 KiB, as a GPU pads its
    // layouts: the report must carry the driver's figure, not the descriptor's.
    let (t, d) = hostile("arrays");
    let r = d.report_in(t.dir.path());
    let kib = 1024;
    assert_eq!(kind(&r, "device", "live_bytes"), MIB + (256 + 64 + 64) * kib, "{d}");
    assert_eq!(total(&r, "alloc_count"), 4, "{d}");
    assert_eq!(total(&r, "free_count"), 2, "{d}");
    assert_eq!(total(&r, "unknown_free_count"), 0, "{d}");
    let apis = |f: &str| the_site(&r, f, &d)["apis"].clone();
    assert_eq!(apis("array_2d"), serde_json::json!(["cudaMallocArray"]), "{d}");
    assert_eq!(the_site(&r, "array_2d", &d)["live_bytes"], 0, "{d}");
    assert_eq!(the_site(&r, "array_2d", &d)["alloc_bytes"], 64 * kib, "padded, not 1000 x 10 x 4{d}");
    assert_eq!(apis("array_3d"), serde_json::json!(["cudaMalloc3DArray"]), "{d}");
    assert_eq!(the_site(&r, "array_3d", &d)["live_bytes"], MIB, "{d}");
    assert_eq!(apis("array_mipmapped"), serde_json::json!(["cudaMallocMipmappedArray"]), "{d}");
    let driver: Vec<_> =
        r["sites"].as_array().unwrap().iter().filter(|s| s["apis"] == serde_json::json!(["cuArrayCreate"])).collect();
    assert_eq!(driver.len(), 1, "the driver's array, reached through dlsym{d}");
    assert_eq!(driver[0]["alloc_bytes"], 256 * kib, "128 x 128 float4{d}");
}

#[test]
fn a_program_whose_threads_all_end_with_pthread_exit_ends() {
    // The shim's writer thread kept the process alive for ever once every thread of the program
    // had ended with pthread_exit (glibc's last thread calls exit(0); ours never did).
    let (t, d) = hostile("pthread-exit");
    let r = d.report_in(t.dir.path());
    assert_eq!(r["reason"], "exit", "{d}");
    assert_eq!(total(&r, "live_bytes"), MIB, "{d}");
}

#[test]
fn standard_streams_closed_before_the_first_allocation_stay_closed() {
    // With stdin and stdout closed, the collector's socket took their numbers: reads waited on
    // the collector and prints went into the event stream (the report had 0 allocations, then
    // SIGPIPE ended the program).
    let t = Target::new("hostile", "closed-stdio").args(&["closed-stdio"]);
    let d = run_bounded(&t);
    assert!(d.status.success(), "{d}");
    assert!(d.stderr.contains("stdin closed, stdout closed"), "{d}");
    let r = d.report_in(t.dir.path());
    assert_eq!(total(&r, "live_bytes"), MIB, "{d}");
}

#[test]
fn a_child_made_by_the_raw_fork_system_call_neither_blocks_nor_waits_at_exit() {
    // No fork handler runs in such a child: it kept the parent's channel, which no thread reads
    // there. Its 20,000 allocations filled it and blocked it for ever, and its exit() waited for
    // GPUSHIM_EXIT_TIMEOUT (here far beyond the test's deadline).
    let t = Target::new("hostile", "raw-fork").args(&["raw-fork"]).env("GPUSHIM_EXIT_TIMEOUT", 100_000);
    let d = run_bounded(&t);
    assert!(d.status.success(), "{d}");
    assert!(d.stdout.contains(&"child status 0".to_string()), "{d}");
    let r = d.report_in(t.dir.path());
    assert_eq!(total(&r, "live_bytes"), MIB, "the parent's report holds its own allocation{d}");
}

#[test]
fn allocations_from_a_thread_with_a_16_kib_stack_do_not_overflow_it() {
    // Unwinding (computing a frame's rule parses DWARF with tables on the stack) overflowed
    // thread stacks of 16 to 32 KiB (SIGSEGV). With too little room the event is recorded
    // without native frames.
    let (t, d) = hostile("small-stack");
    let r = d.report_in(t.dir.path());
    assert_eq!(total(&r, "live_bytes"), 2 * MIB, "{d}");
    assert_eq!(total(&r, "alloc_count"), 2, "{d}");
}

#[test]
fn memory_of_a_context_torn_down_is_freed_in_the_report() {
    // After cudaDeviceReset the device was back to its starting use, but the report kept 64 MiB
    // live (and a later allocation at the same address counted as "replaced").
    let (t, d) = hostile("device-reset");
    let r = d.report_in(t.dir.path());
    assert_eq!(kind(&r, "device", "live_bytes"), 2 * MIB, "{d}");
    assert_eq!(kind(&r, "pinned_host", "live_bytes"), MIB, "pinned memory carries no device and stays{d}");
    assert_eq!(total(&r, "free_count"), 2, "{d}");
    assert_eq!(total(&r, "replaced_count"), 0, "{d}");
    assert_eq!(total(&r, "unknown_free_count"), 0, "{d}");
    let notes = notes(&r);
    assert!(
        notes.contains(&"cudaDeviceReset tore down GPU 0's context and freed 1 live allocation (64.0 MiB) with it"),
        "{notes:?}"
    );
    assert!(
        notes.contains(&"cuCtxDestroy tore down GPU 0's context and freed 1 live allocation (1.0 MiB) with it"),
        "{notes:?}"
    );
}

#[test]
fn stream_ordered_memory_counts_on_the_device_of_its_stream() {
    // cudaMallocAsync and cuMemAllocAsync on a stream of device 1 while device 0 was current
    // were counted on GPU 0 (768 MiB on GPU 1 reported on GPU 0 on two H200s).
    let (t, d) = hostile("stream-device");
    let r = d.report_in(t.dir.path());
    assert_eq!(gpu_live(&r, 1), 12 * MIB, "{d}");
    assert_eq!(gpu_live(&r, 0), MIB, "the default stream is the current device's{d}");
}

#[test]
fn contexts_the_program_creates_and_the_last_release_of_a_primary_context_free_their_own_memory() {
    // A context made by cuCtxCreate and destroyed from a thread where it was not current was
    // not seen (its 2 MiB stayed live), and the last cuDevicePrimaryCtxRelease, which destroys
    // the primary context (cudarc's drop does it), was not seen either (1 MiB stayed live).
    let (t, d) = hostile("contexts");
    let r = d.report_in(t.dir.path());
    assert_eq!(kind(&r, "device", "live_bytes"), 4 * MIB, "the other created context keeps its memory{d}");
    let torn: Vec<(&str, bool, u64)> = r["context_teardowns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["api"].as_str().unwrap(), c["created"].as_bool().unwrap(), c["bytes"].as_u64().unwrap()))
        .collect();
    assert_eq!(torn, vec![("cuCtxDestroy", true, 2 * MIB), ("cuDevicePrimaryCtxRelease", false, MIB)], "{d}");
    assert_eq!(total(&r, "free_count"), 2, "{d}");
    assert_eq!(total(&r, "unknown_free_count"), 0, "{d}");
    let notes = notes(&r);
    assert!(
        notes.contains(&"cuCtxDestroy tore down a context the program created on GPU 0 and freed 1 live allocation (2.0 MiB) with it"),
        "{notes:?}"
    );
    assert!(
        notes.contains(
            &"cuDevicePrimaryCtxRelease tore down GPU 0's context and freed 1 live allocation (1.0 MiB) with it"
        ),
        "{notes:?}"
    );
}

#[test]
fn destroying_a_context_the_program_created_leaves_stream_ordered_and_pool_memory() {
    // Pool memory is the device's: the shim recorded the context current at a cuMemAllocAsync
    // (and at a pool allocation), and destroying that context counted them freed; the program's
    // later, successful frees were then unknown.
    let (t, d) = hostile("ctx-device-memory");
    let r = d.report_in(t.dir.path());
    assert_eq!(kind(&r, "device", "live_bytes"), 0, "{d}");
    assert_eq!((total(&r, "free_count"), total(&r, "unknown_free_count")), (3, 0), "{d}");
    let notes = notes(&r);
    assert!(
        notes.contains(&"cuCtxDestroy tore down a context the program created on GPU 0 and freed 1 live allocation (1.0 MiB) with it"),
        "{notes:?}"
    );
}

#[test]
fn memory_from_a_pool_counts_on_the_pools_device_and_an_oom_report_gives_that_devices_free_memory() {
    // A pool located on device 1, allocated from on a stream of device 0, was counted on GPU 0.
    let (t, d) = hostile("pool-device");
    let r = d.report_in(t.dir.path());
    assert_eq!((gpu_live(&r, 1), gpu_live(&r, 0)), (10 * MIB, 0), "{d}");

    // An out-of-memory failure on a stream of device 1 gave device 0's free memory (16 MiB).
    let t = Target::new("hostile", "oom-device").args(&["oom-device"]).env("STANDIN_DEVICE_BYTES", 64 * MIB);
    let d = run_bounded(&t);
    assert!(d.status.success(), "{d}");
    let r = d.report_in(t.dir.path());
    let info: Vec<(i64, u64, u64)> = r["mem_info"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["device"].as_i64().unwrap(), m["free_bytes"].as_u64().unwrap(), m["total_bytes"].as_u64().unwrap()))
        .collect();
    assert_eq!(info, vec![(1, 32 * MIB, 64 * MIB)], "{d}");
    assert_eq!(r["failures"][0]["device"], 1, "{d}");
}

/// Runs a VMM scenario: its final report and its snapshot `1..=n` reports.
fn vmm_run(scenario: &str, snapshots: u32) -> (Done, serde_json::Value, Vec<serde_json::Value>) {
    let (t, d) = hostile(scenario);
    let r = d.report_in(t.dir.path());
    let snaps = (1..=snapshots)
        .map(|n| read_json(&t.dir.path().join(format!("gpushim-{}-snapshot-{n}.json", d.pid())), &d))
        .collect();
    (d, r, snaps)
}

/// `(live bytes, frees, unknown frees)` of a report.
fn vmm_totals(r: &serde_json::Value) -> (u64, u64, u64) {
    (total(r, "live_bytes"), total(r, "free_count"), total(r, "unknown_free_count"))
}

/// `vmm[]`'s entry of GPU 0 as (handles, created, released but mapped, imported handles, mapped).
fn vmm_gpu0(r: &serde_json::Value) -> (u64, u64, u64, u64, u64) {
    let v = r["vmm"].as_array().and_then(|a| a.iter().find(|v| v["ordinal"] == 0)).unwrap_or_else(|| panic!("{r:#}"));
    let n = |f: &str| v[f].as_u64().unwrap();
    (n("handles"), n("created_bytes"), n("released_mapped_bytes"), n("imported_handles"), n("mapped_bytes"))
}

#[test]
fn vmm_memory_released_while_mapped_stays_live_until_unmapped() {
    // cuMemCreate + cuMemMap + cuMemRelease left 64 MiB in use and readable on the H200, and the
    // report said 0 live: the release was counted as the free.
    let (d, r, s) = vmm_run("vmm-release-mapped", 1);
    assert!(d.stdout.contains(&"after release: +64 MiB in use, byte 42".to_string()), "{d}");
    assert!(d.stdout.contains(&"after unmap: +0 MiB in use".to_string()), "{d}");
    assert_eq!(vmm_totals(&s[0]), (64 * MIB, 0, 0), "{d}");
    assert_eq!(vmm_gpu0(&s[0]), (1, 64 * MIB, 64 * MIB, 0, 64 * MIB), "{d}");
    assert_eq!(vmm_totals(&r), (0, 1, 0), "{d}");
    assert_eq!(vmm_gpu0(&r), (0, 0, 0, 0, 0), "{d}");
    assert_eq!(the_site(&r, "vmm_create", &d)["free_count"], 1, "the free counts at cuMemCreate's site{d}");
    assert!(
        d.stderr.contains("gpushim: VMM on GPU 0: 0 handles, 0 B created; 0 B mapped in 0 mappings (peak 64.0 MiB)"),
        "{d}"
    );
}

#[test]
fn vmm_nccl_retain_release_unmap_release_frees_once() {
    // cuMemRetainAllocationHandle returns the cuMemCreate's handle: the first release was counted
    // as the free and the second as a free of an unknown handle.
    let (d, r, s) = vmm_run("vmm-nccl", 1);
    for line in ["retained the same handle: 1", "after unmap: +64 MiB in use", "after the last release: +0 MiB in use"]
    {
        assert!(d.stdout.contains(&line.to_string()), "{line}{d}");
    }
    assert_eq!(vmm_totals(&s[0]), (64 * MIB, 0, 0), "{d}");
    assert_eq!(vmm_gpu0(&s[0]), (1, 64 * MIB, 0, 0, 0), "{d}");
    assert_eq!(vmm_totals(&r), (0, 1, 0), "{d}");
    assert_eq!(total(&r, "failed_free_count"), 0, "{d}");
}

#[test]
fn vmm_one_unmap_over_two_handles_then_their_releases() {
    let (d, r, s) = vmm_run("vmm-unmap-two", 1);
    assert!(d.stdout.contains(&"after unmap: +64 MiB in use".to_string()), "{d}");
    assert!(d.stdout.contains(&"after release: +0 MiB in use".to_string()), "{d}");
    assert_eq!(vmm_totals(&s[0]), (64 * MIB, 0, 0), "{d}");
    assert_eq!(vmm_gpu0(&s[0]), (2, 64 * MIB, 0, 0, 0), "{d}");
    assert_eq!(vmm_totals(&r), (0, 2, 0), "{d}");
    assert_eq!(total(&r, "unknown_unmap_count"), 0, "{d}");
}

#[test]
fn vmm_an_imported_handle_counts_no_bytes_twice_and_frees_nothing_unknown() {
    // A handle exported as a POSIX descriptor and imported back in the same process: the
    // import is another handle for the same 64 MiB.
    let (d, r, s) = vmm_run("vmm-import", 1);
    assert!(d.stdout.contains(&"imported mapped: +64 MiB in use".to_string()), "{d}");
    assert!(d.stdout.contains(&"after release: +0 MiB in use".to_string()), "{d}");
    assert_eq!(vmm_totals(&s[0]), (64 * MIB, 0, 0), "{d}");
    assert_eq!(vmm_totals(&r), (0, 1, 0), "the import's release is no unknown free{d}");
    assert_eq!(vmm_gpu0(&s[0]), (1, 64 * MIB, 0, 1, 64 * MIB), "{d}");
    assert_eq!(vmm_gpu0(&r), (0, 0, 0, 0, 0), "{d}");
}

/// The report's notes.
fn notes(r: &serde_json::Value) -> Vec<&str> {
    r["notes"].as_array().unwrap().iter().filter_map(|n| n.as_str()).collect()
}

#[test]
fn graph_allocations_are_live_from_their_launch_under_the_site_that_made_their_node() {
    // 64 graphs, each with a 1 MiB allocation node never freed, launched once and destroyed:
    // the memory stays allocated (graph destruction frees nothing). No hook saw it: the report
    // said 0 B (a 64 MiB graph leak on the H200, issue 11).
    let (t, d) = hostile("graph-leak");
    let r = d.report_in(t.dir.path());
    assert_eq!(kind(&r, "device", "live_bytes"), 64 * MIB, "{d}");
    assert_eq!(kind(&r, "device", "live_count"), 64, "{d}");
    let site = the_site(&r, "graph_alloc_node", &d);
    assert_eq!(site["live_bytes"], 64 * MIB, "{d}");
    assert_eq!(site["apis"], serde_json::json!(["cudaGraphAddMemAllocNode"]), "{d}");
    let suspects = r["suspects"].as_array().unwrap();
    assert!(suspects.iter().any(|s| s["site"] == site["id"]), "the node's site is a suspect{d}");
    let notes = notes(&r);
    assert!(
        notes.contains(&"graph memory: 64 launches of 64 executable graphs with memory nodes; 64.0 MiB live at the end in 64 graph allocations, under the sites that made their nodes"),
        "{notes:?}"
    );
    assert!(
        notes.contains(&"cudaDeviceGraphMemTrim returned GPU 0's unused graph memory to the system (1 call): reserved memory only, no allocation was freed"),
        "{notes:?}"
    );
}

#[test]
fn a_captured_allocation_of_a_graph_destroyed_unlaunched_is_never_live() {
    // A 32 MiB cudaMallocAsync captured into a graph destroyed without a launch: the shim
    // counted it live at capture, a phantom 32 MiB for ever (as on the H200, issue 11).
    let (t, d) = hostile("graph-capture-unlaunched");
    let r = d.report_in(t.dir.path());
    assert_eq!(total(&r, "live_bytes"), 0, "{d}");
    assert_eq!(total(&r, "alloc_count"), 0, "{d}");
    assert_eq!(total(&r, "unknown_free_count"), 0, "{d}");
    let notes = notes(&r);
    assert!(
        notes.contains(
            &"32.0 MiB in 1 graph allocation node that no launch reached: never allocated, not counted as live"
        ),
        "{notes:?}"
    );
}

#[test]
fn stream_captures_begun_every_way_make_graph_nodes_and_no_capture_means_no_capture_query() {
    // The shim asked the driver a stream's capture state twice and its device once per pool-hit
    // pair (100 to 300 ns each on a real driver): now neither while no capture is in progress,
    // nor the device when the process sees one GPU. Captures begun through the runtime, the
    // per-thread stream's driver ABI, cuStreamBeginCaptureToGraph and CUDA 10.0's ABI
    // (cuGetProcAddress) still make graph nodes, never live allocations.
    let (t, d) = hostile("capture-queries");
    let counts = |when: &str| {
        let line = d.stdout.iter().find(|l| l.starts_with(when)).unwrap_or_else(|| panic!("{d}"));
        line.split(' ').skip(1).map(|kv| kv.split('=').nth(1).unwrap().parse::<u64>().unwrap()).collect::<Vec<_>>()
    };
    let before = counts("before ");
    assert_eq!(before, vec![0, 0, 0], "no capture query, no device query outside captures{d}");
    let captured = counts("captured ");
    assert!(captured[0] >= 4, "each captured allocation asked{d}");
    assert_eq!(counts("after "), captured, "none after the captures ended{d}");
    let r = d.report_in(t.dir.path());
    assert_eq!(total(&r, "live_bytes"), MIB, "{d}");
    assert_eq!(total(&r, "alloc_count"), 201, "{d}");
    assert_eq!(total(&r, "free_count"), 200, "{d}");
    let notes = notes(&r);
    assert!(
        notes.contains(
            &"15.0 MiB in 4 graph allocation nodes that no launch reached: never allocated, not counted as live"
        ),
        "{notes:?}"
    );
}

#[test]
fn a_captured_allocation_is_live_from_launch_and_auto_free_frees_it_at_each_relaunch() {
    let (t, d) = hostile("graph-capture-launch");
    let r = d.report_in(t.dir.path());
    assert_eq!(total(&r, "live_bytes"), 4 * MIB, "{d}");
    assert_eq!((total(&r, "alloc_count"), total(&r, "free_count")), (3, 2), "{d}");
    assert_eq!(total(&r, "replaced_count"), 0, "{d}");
    let site = the_site(&r, "captured_alloc", &d);
    assert_eq!(site["live_bytes"], 4 * MIB, "{d}");
    assert_eq!(site["apis"], serde_json::json!(["cudaMallocAsync"]), "{d}");
}

#[test]
fn an_allocation_freed_in_its_own_graph_is_allocated_and_freed_by_each_launch() {
    let (t, d) = hostile("graph-alloc-free");
    let r = d.report_in(t.dir.path());
    assert_eq!(total(&r, "live_bytes"), 0, "{d}");
    assert_eq!((total(&r, "alloc_count"), total(&r, "free_count")), (3, 3), "{d}");
    assert_eq!(total(&r, "peak_live_bytes"), 16 * MIB, "{d}");
    assert_eq!(total(&r, "unknown_free_count"), 0, "{d}");
}

#[test]
fn a_graph_allocation_freed_outside_its_graph_or_by_another_graph_is_freed() {
    // cudaFreeAsync of a graph allocation was an unknown free, and the allocation never live.
    let (t, d) = hostile("graph-free-elsewhere");
    let r = d.report_in(t.dir.path());
    assert_eq!(total(&r, "live_bytes"), 0, "{d}");
    assert_eq!((total(&r, "alloc_count"), total(&r, "free_count")), (2, 2), "{d}");
    assert_eq!(total(&r, "unknown_free_count"), 0, "{d}");
}

/// Runs `hostile nvml-growth` with the collector loading `nvml_lib` as NVML.
fn nvml_growth(test: &str, nvml_lib: &std::path::Path) -> (Target, Done) {
    let t = Target::new("hostile", test).args(&["nvml-growth"]);
    let file = t.dir.path().join("nvml.txt");
    if !nvml_lib.exists() {
        // No NVML: no query will come; the program need not wait for one.
        std::fs::write(t.dir.path().join("nvml.txt.queries"), "").unwrap();
    }
    let t = t
        .env("GPUSHIM_STANDIN_NVML", file.display())
        .env("GPUSHIM_NVML_LIB", nvml_lib.display())
        .env("GPUSHIM_NVML_INTERVAL_MS", 5);
    let d = run_bounded(&t);
    assert!(d.status.success(), "{d}");
    (t, d)
}

#[test]
fn untraced_device_memory_is_the_drivers_per_process_figure_minus_traced_and_its_growth_is_a_finding() {
    // Issue 13: a JAX function recompiled per static argument grows device memory by about
    // 8 MiB per call through loaded modules, which no allocation call explains. The NVML
    // stand-in says 501 MiB at the first allocation (1 MiB traced), then 8 MiB untraced and
    // 1 MiB traced more for each of 20 calls.
    let (t, d) = nvml_growth("nvml-growth", &standin("libnvidia-ml.so.1"));
    let r = d.report_in(t.dir.path());
    let g = &r["gpu_memory"][0];
    assert_eq!(g["ordinal"], 0, "{d}");
    assert_eq!(
        g["owners"],
        serde_json::json!([{"owner": "user code (direct calls)", "live_bytes": 21 * MIB, "live_count": 21}]),
        "{d}"
    );
    assert_eq!(g["traced_bytes"], 21 * MIB, "{d}");
    assert_eq!(g["driver_bytes"], 681 * MIB, "{d}");
    assert_eq!(g["untraced_bytes"], 660 * MIB, "{d}");
    assert_eq!(g["untraced_first_bytes"], 500 * MIB, "{d}");
    let finding = r["findings"][0].as_str().unwrap_or_default();
    assert!(
        finding.starts_with(
            "GPU 0: untraced device memory grew by 160.0 MiB over the run (500.0 MiB to 660.0 MiB, about "
        ),
        "{finding}{d}"
    );
    assert!(
        r["suspects"].as_array().unwrap().iter().all(|s| s["live_bytes"] != 660 * MIB),
        "a finding, not a suspect{d}"
    );
    assert!(
        d.stderr.contains("gpushim: GPU 0 memory: user code (direct calls) 21.0 MiB; untraced 660.0 MiB (the driver counts 681.0 MiB)"),
        "{d}"
    );
    assert!(d.stderr.contains("gpushim: finding: GPU 0: untraced device memory grew by 160.0 MiB"), "{d}");
}

#[test]
fn without_nvml_the_report_says_untraced_memory_is_unknown() {
    let (t, d) = nvml_growth("nvml-none", std::path::Path::new("/nonexistent/libnvidia-ml.so.1"));
    let r = d.report_in(t.dir.path());
    let g = &r["gpu_memory"][0];
    assert_eq!(g["traced_bytes"], 21 * MIB, "{d}");
    assert_eq!(g["driver_bytes"], serde_json::Value::Null, "{d}");
    assert_eq!(g["untraced_bytes"], serde_json::Value::Null, "{d}");
    let note = g["driver_note"].as_str().unwrap_or_default();
    assert!(
        note.starts_with("unknown: no NVML (no NVIDIA driver): /nonexistent/libnvidia-ml.so.1 could not be loaded"),
        "{note}{d}"
    );
    assert_eq!(r["findings"], serde_json::json!([]), "{d}");
    // The stderr summary leaves the table out: nothing is known beyond its first line.
    assert!(!d.stderr.contains("GPU 0 memory"), "{d}");
    assert!(d.stderr.contains(" (exit): 21 allocations live, 21.0 MiB (device 21.0 MiB on GPU 0)"), "{d}");
}

#[test]
fn a_pointer_freed_by_another_thread_before_its_allocating_call_returned_is_counted_once() {
    // The allocating call writes the caller's out-parameter before it returns; a thread that
    // frees the pointer as soon as it appears there made its free precede the allocation in
    // the stream (hundreds of unknown frees and as many "replaced" in 200,000 pairs).
    let (t, d) = hostile("published-early");
    let r = d.report_in(t.dir.path());
    assert_eq!((total(&r, "alloc_count"), total(&r, "free_count")), (200_000, 200_000), "{d}");
    assert_eq!((total(&r, "unknown_free_count"), total(&r, "replaced_count")), (0, 0), "{d}");
    assert_eq!((total(&r, "live_count"), total(&r, "live_bytes")), (0, 0), "{d}");
}

#[test]
fn gpushim_snapshot_of_a_program_with_its_own_handler_of_the_signal_does_not_run_it() {
    // A program that installs its own SIGUSR1 handler after its first allocation (a graceful
    // restart): `gpushim snapshot` ran that handler and then said no snapshot appeared.
    let t = Target::new("hostile", "own-usr1").args(&["own-usr1"]);
    let mut live = Live::start(&t);
    assert_eq!(live.line(), "ready");
    let path = take_snapshot(live.pid);
    assert!(path.ends_with("-snapshot-1.json"), "{path}");
    let snap = read_json(std::path::Path::new(&path), &path);
    assert_eq!(total(&snap, "live_bytes"), MIB, "{path}");
    let d = live.finish();
    assert!(d.status.success(), "{d}");
    assert!(d.stdout.contains(&"handler ran 0".to_string()), "{d}");
    assert_eq!(total(&d.report_in(t.dir.path()), "live_bytes"), 3 * MIB, "{d}");
}
