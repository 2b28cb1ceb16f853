//! The grammar of the settings both processes read from the environment: one for every switch
//! (`GPUSHIM_BACKTRACE`, `GPUSHIM_HTML`, …), and the names that exist, for the line that says
//! a misspelt one.

/// A switch's value: `1`, `true`, `yes`, `on` or `0`, `false`, `no`, `off`, in any case and
/// with spaces around; anything else is `None`.
pub fn switch(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "0" | "false" | "no" | "off" => Some(false),
        "1" | "true" | "yes" | "on" => Some(true),
        _ => None,
    }
}

/// What a line about a bad switch value says the value is not.
pub const NOT_A_SWITCH: &str = "is not a switch (1, on, yes, true or 0, off, no, false)";

/// Every `GPUSHIM_*` variable the shim, the collector or the Python package reads (the README
/// lists them). `gpushim run`'s own plumbing (`GPUSHIM_RUN_*`) and the tests' and tools'
/// (`GPUSHIM_TEST_*`, `GPUSHIM_FUZZ_*`, `GPUSHIM_SUITE_*`, `GPUSHIM_STANDIN*`, the examples' `GPUSHIM_EXAMPLE_*`, the scripts' `GPUSHIM_BIN`) are prefixes of
/// their own.
pub const KNOWN: &[&str] = &[
    "GPUSHIM_BACKTRACE",
    "GPUSHIM_COLLECTOR",
    "GPUSHIM_DEFAULT_SUPPRESSIONS",
    "GPUSHIM_EXIT_TIMEOUT",
    "GPUSHIM_HEAP_WALK",
    "GPUSHIM_HEAP_WALK_MS",
    "GPUSHIM_HEAP_WALK_NATIVE",
    "GPUSHIM_HTML",
    "GPUSHIM_INTERNAL_MODULES",
    "GPUSHIM_KEEP_CELL_SNAPSHOTS",
    "GPUSHIM_MAX_FRAMES",
    "GPUSHIM_MAX_STACKS",
    "GPUSHIM_METRICS",
    "GPUSHIM_METRICS_TOP",
    "GPUSHIM_NVML",
    "GPUSHIM_NVML_INTERVAL_MS",
    "GPUSHIM_NVML_LIB",
    "GPUSHIM_OUTPUT",
    "GPUSHIM_PYTHON",
    "GPUSHIM_REACHABILITY",
    "GPUSHIM_REACHABILITY_CUDA_DATA",
    "GPUSHIM_REACHABILITY_MS",
    "GPUSHIM_REACHABILITY_THREADS",
    "GPUSHIM_RECORD",
    "GPUSHIM_REORDER_MIB",
    "GPUSHIM_REPORT_INTERVAL",
    "GPUSHIM_REPORT_KEEP",
    "GPUSHIM_SIGNAL",
    "GPUSHIM_SUPPRESSIONS",
    "GPUSHIM_TORCH_STACKS",
    "GPUSHIM_UNWIND",
    "GPUSHIM_UNWIND_CACHE",
    "GPUSHIM_USER_MODULES",
];

/// Prefixes of variables that are no user's settings (see [`KNOWN`]).
const OTHERS: &[&str] = &[
    "GPUSHIM_RUN_",
    "GPUSHIM_TEST_",
    "GPUSHIM_FUZZ_",
    "GPUSHIM_SUITE_",
    "GPUSHIM_STANDIN",
    "GPUSHIM_EXAMPLE_",
    "GPUSHIM_BIN",
];

/// The line for an environment variable `name` that looks like a setting of ours and is none:
/// `None` for a known one, another program's, or plumbing.
/// A name in another case (`gpushim_output`) is one too: the settings are upper case, and
/// the nearest one is named.
pub fn unknown(name: &str) -> Option<String> {
    let upper = name.to_ascii_uppercase();
    let cased = upper == name;
    if !upper.starts_with("GPUSHIM_")
        || (cased && (KNOWN.contains(&name) || OTHERS.iter().any(|p| name.starts_with(p))))
    {
        return None;
    }
    let nearest = KNOWN.iter().map(|k| (distance(&upper, k), *k)).min().filter(|&(d, _)| d <= 3);
    let case = if cased { "" } else { "settings are upper case; " };
    Some(match nearest {
        Some((_, k)) => format!("{name} is no gpushim setting ({case}did you mean {k}?); it is ignored"),
        None if cased => format!("{name} is no gpushim setting; it is ignored (the README lists them)"),
        None => format!("{name} is no gpushim setting (settings are upper case); it is ignored"),
    })
}

/// The edit distance of two ASCII names (insertions, deletions, substitutions).
fn distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, &x) in a.iter().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, &y) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(x != y)).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_switch_grammar() {
        for v in ["1", "true", "YES", " on "] {
            assert_eq!(switch(v), Some(true), "{v}");
        }
        for v in ["0", "False", "no", "OFF"] {
            assert_eq!(switch(v), Some(false), "{v}");
        }
        assert_eq!(switch("maybe"), None);
        assert_eq!(switch(""), None);
    }

    #[test]
    fn a_misspelt_setting_is_named_with_the_nearest_one() {
        assert_eq!(
            unknown("GPUSHIM_OUPTUT").as_deref(),
            Some("GPUSHIM_OUPTUT is no gpushim setting (did you mean GPUSHIM_OUTPUT?); it is ignored")
        );
        assert_eq!(unknown("GPUSHIM_OUTPUT"), None);
        assert_eq!(unknown("GPUSHIM_RUN_FD"), None);
        assert_eq!(unknown("CUDA_VISIBLE_DEVICES"), None);
        assert!(unknown("GPUSHIM_FROBNICATE").unwrap().ends_with("it is ignored (the README lists them)"));
        // Another case is named too, with the setting meant.
        assert_eq!(
            unknown("gpushim_output").as_deref(),
            Some("gpushim_output is no gpushim setting (settings are upper case; did you mean GPUSHIM_OUTPUT?); it is ignored")
        );
        assert_eq!(
            unknown("Gpushim_Ouptut").as_deref().map(|l| l.contains("did you mean GPUSHIM_OUTPUT?")),
            Some(true)
        );
        assert_eq!(unknown("gpushim_run_fd").as_deref().map(|l| l.contains("upper case")), Some(true));
        assert_eq!(unknown("cuda_visible_devices"), None);
    }
}
