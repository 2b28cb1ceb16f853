//! Every environment variable the collector reads, read once into one [`Settings`] (the first
//! time a part of the collector asks, [`Settings::global`]). Each value is kept as it was set;
//! what it means, and what a bad value does, is said where it is used, so that the grammar of
//! each setting lives beside its one parser: `cmd/collect.rs` (the reports asked for, the
//! bounds, the metrics endpoint), `explain/frames.rs` (user and framework modules),
//! `explain/suppress.rs` (suppressions), `explain/nvml.rs` (the driver's view) and
//! `report/output.rs` (where a report goes when its directory cannot take it).

use std::ffi::OsString;
use std::sync::OnceLock;

/// The collector's settings as set in its environment (the traced program's, which the
/// collector inherits). `None`: not set, or not UTF-8 where a string is read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    /// `GPUSHIM_HTML`: `1` writes each report's HTML page beside its JSON.
    pub html: Option<String>,
    /// `GPUSHIM_REPORT_INTERVAL`: seconds between interval reports.
    pub report_interval: Option<String>,
    /// `GPUSHIM_REPORT_KEEP`: interval reports kept.
    pub report_keep: Option<String>,
    /// `GPUSHIM_METRICS`: `HOST:PORT` of the Prometheus endpoint.
    pub metrics: Option<String>,
    /// `GPUSHIM_METRICS_TOP`: sites the endpoint lists.
    pub metrics_top: Option<String>,
    /// `GPUSHIM_REORDER_MIB`: the reorder buffer's bound.
    pub reorder_mib: Option<String>,
    /// `GPUSHIM_MAX_STACKS`: the most sites kept.
    pub max_stacks: Option<String>,
    /// `GPUSHIM_NVML`: `0` samples no NVML.
    pub nvml: Option<String>,
    /// `GPUSHIM_NVML_INTERVAL_MS`: how often NVML is sampled.
    pub nvml_interval_ms: Option<String>,
    /// `GPUSHIM_NVML_LIB`: the NVML library loaded.
    pub nvml_lib: Option<String>,
    /// `GPUSHIM_RUN_DEMO`: set by `gpushim demo` for the examples it runs (plumbing, not a
    /// user's setting), so that what the demo turned off is not said as the user's doing.
    pub demo: Option<String>,
    /// `GPUSHIM_USER_MODULES`: modules that are the user's code.
    pub user_modules: Option<String>,
    /// `GPUSHIM_INTERNAL_MODULES`: modules that are framework code.
    pub internal_modules: Option<String>,
    /// `TORCHINDUCTOR_CACHE_DIR`: where torch.compile writes the code it generates.
    pub torchinductor_cache_dir: Option<String>,
    /// `GPUSHIM_SUPPRESSIONS`: suppression files.
    pub suppressions: Option<String>,
    /// `GPUSHIM_DEFAULT_SUPPRESSIONS`: `0` drops the built-in suppressions.
    pub default_suppressions: Option<String>,
    /// `GPUSHIM_RECORD`: a directory the raw event stream is copied into as it is read.
    pub record: Option<OsString>,
    /// `TMPDIR`: the first place a report goes when its directory cannot take it.
    pub tmpdir: Option<OsString>,
}

impl Settings {
    /// The settings of this process's environment, read the first time they are asked for.
    pub fn global() -> &'static Settings {
        static S: OnceLock<Settings> = OnceLock::new();
        S.get_or_init(|| Settings {
            record: std::env::var_os("GPUSHIM_RECORD").filter(|v| !v.is_empty()),
            ..Settings::read(&|k| std::env::var(k).ok(), std::env::var_os("TMPDIR"))
        })
    }

    /// The settings that `get` gives by variable name, with `tmpdir` as `TMPDIR`.
    pub fn read(get: &dyn Fn(&str) -> Option<String>, tmpdir: Option<OsString>) -> Settings {
        Settings {
            html: get("GPUSHIM_HTML"),
            report_interval: get("GPUSHIM_REPORT_INTERVAL"),
            report_keep: get("GPUSHIM_REPORT_KEEP"),
            metrics: get("GPUSHIM_METRICS"),
            metrics_top: get("GPUSHIM_METRICS_TOP"),
            reorder_mib: get("GPUSHIM_REORDER_MIB"),
            max_stacks: get("GPUSHIM_MAX_STACKS"),
            nvml: get("GPUSHIM_NVML"),
            nvml_interval_ms: get("GPUSHIM_NVML_INTERVAL_MS"),
            nvml_lib: get("GPUSHIM_NVML_LIB"),
            demo: get("GPUSHIM_RUN_DEMO"),
            user_modules: get("GPUSHIM_USER_MODULES"),
            internal_modules: get("GPUSHIM_INTERNAL_MODULES"),
            torchinductor_cache_dir: get("TORCHINDUCTOR_CACHE_DIR"),
            suppressions: get("GPUSHIM_SUPPRESSIONS"),
            default_suppressions: get("GPUSHIM_DEFAULT_SUPPRESSIONS"),
            record: None,
            tmpdir,
        }
    }
}
