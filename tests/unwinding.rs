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
