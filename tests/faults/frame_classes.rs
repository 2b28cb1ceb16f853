//! Whose code a stack is (issue 13): a vendor library's frames are not the user's, one line of
//! the user's code is one suspect however many stacks it allocates through, and each site says
//! which threads allocated there (tests/programs/threads.c, fakecublas.c).

use crate::util::*;

/// The line of `worker_gemm`'s call of `cublasCreate_v2` in tests/programs/threads.c.
fn handle_line() -> usize {
    let src = include_str!("../programs/threads.c");
    1 + src.lines().position(|l| l.contains("worker_gemm: the handle's line")).expect("marker line")
}

#[test]
fn a_handle_per_thread_through_a_vendor_library_is_one_suspect_at_the_users_line() {
    // 100 threads each create a cuBLAS handle (three 1 MiB allocations on three stacks inside
    // libcublas.so.13, two of device memory and one of pinned host memory) and never destroy it. Before frame classes every suspect said
    // `at libcublas.so.13+0x…` (the library counted as the user's code), and there were three.
    let t = Target::new("threads", "cublas-per-thread").args(&["cublas-per-thread", "100"]);
    let d = run_bounded(&t);
    assert!(d.status.success(), "{d}");
    let r = d.report_in(t.dir.path());
    assert_eq!(total(&r, "live_bytes"), 300 * MIB, "{d}");
    let sites = sites_with(&r, "cublasCreate_v2");
    assert_eq!(sites.len(), 3, "three stacks inside the library{d}");
    let suspects = r["suspects"].as_array().unwrap();
    assert_eq!(suspects.len(), 1, "one suspect for the one line{d}");
    let s = &suspects[0];
    let want = format!("worker_gemm (programs/threads.c:{}) via cublasCreate_v2", handle_line());
    assert_eq!(s["headline"], want.as_str(), "{d}");
    assert_eq!(s["live_bytes"], 300 * MIB, "{d}");
    assert_eq!(s["live_count"], 300, "{d}");
    assert_eq!(s["threads"], 100, "{d}");
    // Two of the three stacks allocate device memory, the third pinned host memory: one cause.
    assert!(s["reason"].as_str().unwrap().ends_with("; by kind: device 200.0 MiB, pinned host 100.0 MiB"), "{d}");
    let mut members: Vec<u64> = s["sites"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
    assert_eq!(members[0], s["site"].as_u64().unwrap(), "the group's site is its first member{d}");
    members.sort_unstable();
    let mut ids: Vec<u64> = sites.iter().map(|x| x["id"].as_u64().unwrap()).collect();
    ids.sort_unstable();
    assert_eq!(members, ids, "{d}");
    // Each site lists its 100 threads by name; the library's frames are vendor code.
    for site in &sites {
        assert_eq!(site["thread_count"], 100, "{d}");
        let threads = site["threads"].as_array().unwrap();
        assert_eq!(threads.len(), 100, "{d}");
        let mut names: Vec<&str> = threads.iter().map(|t| t["name"].as_str().unwrap()).collect();
        names.sort_unstable();
        let mut want: Vec<String> = (0..100).map(|i| format!("gemm-{i}")).collect();
        want.sort_unstable();
        assert_eq!(names, want, "{d}");
        assert!(threads.iter().all(|t| t["alloc_count"] == 1 && t["alloc_bytes"] == MIB), "{d}");
        let frames = site["frames"].as_array().unwrap();
        let lib = frames.iter().find(|f| f["function"] == "cublasCreate_v2").unwrap();
        assert_eq!((lib["class"].as_str(), lib["internal"].as_bool()), (Some("vendor"), Some(true)), "{d}");
        let user = frames.iter().find(|f| f["function"] == "worker_gemm").unwrap();
        assert_eq!((user["class"].as_str(), user["internal"].as_bool()), (Some("user"), Some(false)), "{d}");
    }
    // The stderr summary says it in the same words.
    let line = d.stderr.lines().find(|l| l.starts_with("gpushim: suspect #1")).unwrap_or_else(|| panic!("{d}"));
    assert!(line.contains(&format!("at {want}, from 100 threads; 3 sites: ")), "{line}{d}");
}

#[test]
fn a_suppression_hides_an_accepted_site_and_the_report_counts_it() {
    let t = Target::new("threads", "cublas-suppressed").args(&["cublas-per-thread", "20"]);
    let file = t.dir.path().join("accepted.supp");
    std::fs::write(&file, "# our handles live as long as the process\n{\n   handles\n   ...\n   fun:cublasCreate_v2\n   fun:worker_gemm\n}\n").unwrap();
    let t = t.env("GPUSHIM_SUPPRESSIONS", file.display());
    let d = run_bounded(&t);
    assert!(d.status.success(), "{d}");
    let r = d.report_in(t.dir.path());
    assert_eq!(r["suspects"].as_array().unwrap().len(), 0, "{d}");
    let hidden = r["suppressed"].as_array().unwrap();
    assert_eq!(hidden.len(), 1, "{d}");
    assert_eq!(hidden[0]["suppression"], "handles", "{d}");
    assert_eq!(hidden[0]["sites"].as_array().unwrap().len(), 3, "{d}");
    assert_eq!(hidden[0]["live_bytes"], 60 * MIB, "{d}");
    assert!(d.stderr.contains("gpushim: 3 suspect sites suppressed: handles (3 sites, 60.0 MiB)\n"), "{d}");
}

#[test]
fn modules_the_user_names_are_the_users_code() {
    // GPUSHIM_USER_MODULES makes the library the user's: the headline is then its entry point.
    let t = Target::new("threads", "cublas-user-module")
        .args(&["cublas-per-thread", "20"])
        .env("GPUSHIM_USER_MODULES", "libcublas.so*");
    let d = run_bounded(&t);
    assert!(d.status.success(), "{d}");
    let r = d.report_in(t.dir.path());
    let heads: Vec<&str> = r["suspects"].as_array().unwrap().iter().map(|s| s["headline"].as_str().unwrap()).collect();
    assert!(!heads.is_empty() && heads.iter().all(|h| !h.contains("worker_gemm")), "{heads:?}{d}");
}
