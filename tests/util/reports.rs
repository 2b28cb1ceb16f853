//! Reading reports: a JSON file, and the fields and sites the tests assert on.

use std::fmt::Display;
use std::path::Path;

use serde_json::Value;

/// The JSON file at `path`. A failure to read or parse it shows `run` (an `Outcome`, a `Done`,
/// or any other account of how the file came to be).
pub fn read_json(path: &Path, run: &dyn Display) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}{run}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("parsing {}: {e}{run}", path.display()))
}

/// `report.kinds.<kind>.<field>`.
pub fn kind(r: &Value, kind: &str, field: &str) -> u64 {
    r["kinds"][kind][field].as_u64().unwrap_or_else(|| panic!("kinds.{kind}.{field} missing in {r:#}"))
}

/// Live bytes the report gives GPU `ordinal` (`devices[]`), 0 when it lists none for it.
pub fn gpu_live(r: &Value, ordinal: i64) -> u64 {
    r["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["ordinal"] == ordinal)
        .map_or(0, |g| g["live_bytes"].as_u64().unwrap())
}

/// `report.totals.<field>`.
pub fn total(r: &Value, field: &str) -> u64 {
    r["totals"][field].as_u64().unwrap_or_else(|| panic!("totals.{field} missing in {r:#}"))
}

/// True if and only if some frame of `site` names `function`.
pub fn site_has(site: &Value, function: &str) -> bool {
    site["frames"].as_array().is_some_and(|fs| fs.iter().any(|f| f["function"].as_str() == Some(function)))
}

/// The sites whose stacks contain `function`.
pub fn sites_with<'a>(r: &'a Value, function: &str) -> Vec<&'a Value> {
    r["sites"].as_array().unwrap().iter().filter(|s| site_has(s, function)).collect()
}

/// The one site whose stack contains `function`.
pub fn the_site<'a>(r: &'a Value, function: &str, run: &dyn Display) -> &'a Value {
    let s = sites_with(r, function);
    assert_eq!(s.len(), 1, "one site for {function}{run}");
    s[0]
}
