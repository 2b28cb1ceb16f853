//! The bundled examples: a C renderer and a Rust cudarc program, each with a known leak that
//! must come out as the top suspect, while their steady allocations must not.

use crate::util::*;

fn suspects(r: &serde_json::Value) -> Vec<&serde_json::Value> {
    r["suspects"].as_array().unwrap().iter().collect()
}

#[test]
fn c_example_render_leak_is_the_top_suspect() {
    let run = Target::new("leak_example", "leak-c").args(&["200"]).run();
    run.success();
    let r = run.report();
    let render = the_site(&r, "render", &run);
    assert_eq!(render["live_count"].as_u64(), Some(200), "{run}");
    assert_eq!(render["live_bytes"].as_u64(), Some(200 * MIB), "{run}");
    let sus = suspects(&r);
    assert!(!sus.is_empty(), "{run}");
    assert_eq!(sus[0]["site"], render["id"], "top suspect is render(){run}");
    let model = sites_with(&r, "load_model");
    assert_eq!(model[0]["live_bytes"].as_u64(), Some(32 * MIB), "{run}");
    assert!(sus.iter().all(|s| s["site"] != model[0]["id"]), "a model loaded once is not a leak{run}");
    let temp = sites_with(&r, "frame_temp");
    assert!(sus.iter().all(|s| s["site"] != temp[0]["id"]), "freed temporaries are not a leak{run}");
    assert_eq!(total(&r, "live_bytes"), 232 * MIB, "{run}");
    // The summary on stderr names the leak's function: the README's lines (the stand-ins have
    // no NVIDIA driver: no GPU memory line), led by what the reachability scan found lost.
    let lines: Vec<&str> = run.stderr.lines().filter(|l| l.starts_with("gpushim: ")).collect();
    assert_eq!(lines.len(), 5, "{run}");
    // A conservative scan promises that lost is never more than the truth (201 allocations no
    // pointer is left to); a stale word on a stack may keep one or two reachable (200 lost
    // and 1 reachable, seen once on a fresh clone), so the counts are bounded, not exact.
    let lost_in = |l: &str, pat: &str| -> u64 {
        let at = l.find(pat).unwrap_or_else(|| panic!("no {pat:?} in {l:?}{run}")) + pat.len();
        l[at..].split(|c: char| !c.is_ascii_digit()).next().unwrap().parse().unwrap()
    };
    let lead = lost_in(lines[0], " in ");
    assert!(lines[0].contains(": definitely lost: ") && (190..=201).contains(&lead), "{run}");
    assert!(lines[1].contains(" (exit): 201 allocations live, 232.0 MiB (device 232.0 MiB on GPU 0); peak "), "{run}");
    let scanned = lost_in(lines[2], "scan complete: ");
    assert!((190..=201).contains(&scanned) && lines[2].contains(" lost, 0 indirectly lost, "), "{run}");
    assert!(
        lines[3].starts_with("gpushim: suspect #1 site ") && lines[3].contains("at render (examples/leak.c:"),
        "{run}"
    );
    assert!(lines[4].starts_with("gpushim: report written to "), "{run}");
    // Each scratch buffer's pointer is a local of render(): at exit no pointer to any is left,
    // and the shim's own copies (its event channel) are not taken for references.
    let lost = render["reach"]["definitely_lost_count"].as_u64().unwrap_or(0);
    assert!((190..=200).contains(&lost), "at most the 200 lost, nearly all found: {lost}{run}");
    assert_eq!(r["reachability"]["status"], "complete", "{run}");
    assert!(r["reachability"].get("note").is_none_or(|n| n.is_null()), "{run}");
}

#[test]
fn rust_cudarc_example_through_dlsym() {
    let run = Target::new(built("cudarc-leak"), "leak-rust").args(&["100"]).run();
    run.success();
    let r = run.report();
    let cache: Vec<_> = r["sites"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| {
            s["frames"]
                .as_array()
                .unwrap()
                .iter()
                .any(|f| f["function"].as_str().is_some_and(|n| n.contains("cache_batch")))
        })
        .collect();
    assert_eq!(cache.len(), 1, "{run}");
    assert_eq!(cache[0]["live_count"].as_u64(), Some(100), "{run}");
    assert_eq!(cache[0]["live_bytes"].as_u64(), Some(100 * 4 * MIB), "{run}");
    assert_eq!(cache[0]["apis"][0], "cuMemAlloc", "{run}");
    let sus = suspects(&r);
    assert_eq!(sus.first().map(|s| &s["site"]), Some(&cache[0]["id"]), "{run}");
    assert_eq!(total(&r, "live_bytes"), 400 * MIB + 16 * MIB, "{run}");
}
