//! The first screen never contradicts itself: for the bundled examples, the numbers of the
//! stderr summary, the text report (`gpushim report`), the HTML page's data and the JSON report of
//! one run agree: live against the totals and the scan, definitely lost against what Python
//! objects hold, the text against the JSON.

use serde_json::Value;

use crate::util::*;

/// The stderr line `gpushim: pid N (exit): C allocations live, …`: (C, the bytes as printed).
fn live_line(stderr: &str) -> Option<(u64, String)> {
    let l = stderr.lines().find(|l| l.contains(" (exit): ") && l.contains(" allocations live, "))?;
    let rest = l.split(" (exit): ").nth(1)?;
    let (count, rest) = rest.split_once(" allocations live, ")?;
    let bytes = rest.split([' ', '(']).take(2).collect::<Vec<_>>().join(" ");
    Some((count.trim().parse().ok()?, bytes.trim().to_string()))
}

/// `definitely lost: X in N allocations` from the first stderr line, if said.
fn lost_line(stderr: &str) -> Option<u64> {
    let l = stderr.lines().find(|l| l.contains(": definitely lost: "))?;
    let n = l.split(" in ").nth(1)?.split(' ').next()?;
    n.parse().ok()
}

fn u(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or(0)
}

/// Checks one run's outputs against each other; `what` names the run in failures.
fn check(run: &Outcome, what: &str) {
    let r = run.report();
    let totals = &r["totals"];
    // stderr's live line is the JSON's totals.
    let (count, shown) = live_line(&run.stderr).unwrap_or_else(|| panic!("{what}: no live line{run}"));
    assert_eq!(count, u(totals, "live_count"), "{what}: live count{run}");
    let scan = &r["reachability"];
    if scan.is_object() && scan["status"] == "complete" {
        // Every live allocation has one class, and none of them is missing from the scan
        // (but those made after it started, which it says are unknown).
        let classes = ["definitely_lost_count", "indirectly_lost_count", "reachable_count", "unknown_count"];
        let classified: u64 = classes.iter().map(|k| u(scan, k)).sum::<u64>() + u(scan, "possibly_lost_count");
        let framework: u64 = scan["framework_held"].as_array().map_or(0, |a| a.iter().map(|f| u(f, "count")).sum());
        assert!(
            classified + framework >= count
                || scan["note"].as_str().is_some_and(|n| n.contains("nothing was live")) && count == 0,
            "{what}: {count} live, the scan classified {classified} and the frameworks hold {framework}: {scan:#}{run}"
        );
        // stderr's definitely lost is the scan's.
        let lost = u(scan, "definitely_lost_count");
        assert_eq!(lost_line(&run.stderr).unwrap_or(0), lost, "{what}: definitely lost{run}");
    }
    // What Python objects hold is not definitely lost: per site, held bytes and definitely lost
    // bytes together are at most its live bytes.
    let holders_file = run.files().into_iter().find(|f| f.ends_with(".holders.json") && !f.contains("-snapshot-"));
    if let Some(f) = holders_file {
        let h = run.read(&f);
        for hs in h["sites"].as_array().into_iter().flatten() {
            let site = hs["site"].as_u64().unwrap();
            let Some(s) = r["sites"].as_array().unwrap().iter().find(|s| s["id"].as_u64() == Some(site)) else {
                continue;
            };
            let held =
                u(hs, "held_bytes").max(hs["holders"].as_array().map_or(0, |a| a.iter().map(|x| u(x, "bytes")).sum()));
            let lost = s["reach"]["definitely_lost_bytes"].as_u64().unwrap_or(0);
            assert!(
                held + lost <= u(s, "live_bytes"),
                "{what}: site {site}: {held} B held and {lost} B definitely lost of {} B live{run}",
                u(s, "live_bytes")
            );
        }
    }
    // The text report says the same totals.
    let json = run
        .files()
        .into_iter()
        .find(|f| f.starts_with("gpushim-") && f.ends_with(".json") && f.matches('.').count() == 1)
        .unwrap();
    let path = run.dir.path().join(&json);
    let text = gpushim(["report", path.to_str().unwrap()]);
    assert!(text.status.success(), "{what}: gpushim report failed: {}", String::from_utf8_lossy(&text.stderr));
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    assert!(
        text.contains(&format!("live: {shown} in {count} allocations")),
        "{what}: the text report's live line\n{text}{run}"
    );
    // The HTML page carries the same report.
    let html = gpushim(["report", path.to_str().unwrap(), "--format", "html"]);
    assert!(html.status.success(), "{what}: gpushim report --format html failed");
    let html = String::from_utf8_lossy(&html.stdout).into_owned();
    let data = html.split("id=\"data\">").nth(1).and_then(|d| d.split("</script>").next());
    let data: Value =
        serde_json::from_str(data.unwrap_or_else(|| panic!("{what}: no data block in the page"))).unwrap();
    assert_eq!(data["totals"]["live_bytes"], totals["live_bytes"], "{what}: the page's live bytes");
    assert_eq!(
        data["suspects"].as_array().map(Vec::len),
        r["suspects"].as_array().map(Vec::len),
        "{what}: the page's suspects"
    );
}

#[test]
fn the_c_example_says_the_same_everywhere() {
    let run = Target::new("leak_example", "consistency-c").args(&["200"]).run();
    run.success();
    check(&run, "leak_example 200");
}

#[test]
fn the_python_example_says_the_same_everywhere() {
    let t = Target::new(crate::python::python3(), "consistency-py");
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/leak.py");
    let run = t.args(&[script.to_str().unwrap()]).env("PYTHONDONTWRITEBYTECODE", "1").run();
    run.success();
    check(&run, "examples/leak.py");
}

/// Programs of the stand-in corpus (scripts/gpu/corpus/standin/, written for the verdict, not for
/// this check): leaks held by a list, by closures, by a queue and as Python ints, and two
/// programs that do not leak; each of their runs says the same everywhere too.
#[test]
fn corpus_programs_say_the_same_everywhere() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = root.join("scripts/gpu/corpus/standin");
    let cudart = standin("libcudart.so.13");
    for (script, arg, internal) in [
        ("py_history.py", "fast", true),
        ("py_closures.py", "fast", true),
        ("py_queue.py", "fast", true),
        ("py_ints.py", "fast", false),
        ("py_negatives.py", "deque", true),
        ("py_negatives.py", "ints", true),
    ] {
        let what = format!("{script} {arg}");
        let path = dir.join(script);
        let mut t = Target::new(crate::python::python3(), &format!("consistency-{}", script.replace('.', "-")))
            .args(&[path.to_str().unwrap(), cudart.to_str().unwrap(), arg])
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("GPUSHIM_NVML", "0");
        if internal {
            t = t.env("GPUSHIM_INTERNAL_MODULES", "devbuf.py");
        }
        let run = t.run();
        run.success();
        check(&run, &what);
    }
}
