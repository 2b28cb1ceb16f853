//! The stand-in corpus (scripts/gpu/corpus/standin/, issue 29): the corpus's scorer builds the
//! corpus's C programs against the stand-ins of this build, runs every program under this build's
//! `gpushim` and writes its table. This checks that the corpus runs end to end (every program
//! builds, runs and leaves a report the scorer can read, and the table and results are written),
//! not how accurate today's verdicts are: those bounds are `EXPECT_MIN`, given to the scorer's
//! `--expect-min`, to be raised as the verdict improves.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::python::python3;
use crate::util::*;

/// The measures the stand-in corpus must reach (score.py `--expect-min`, comma-separated
/// `METRIC=VALUE`: right, precision, recall, headline, holder, lost_precision, lost_recall).
/// Raised as the verdict work (issue 29) lands, below what runs here show (2026-12-03 14:45 UTC,
/// after the program's own steps and the heap walk's evidence: 28 of 28 twice; under load
/// earlier the same day a fast leak was missed once in three runs): room for one fast leak
/// missed or one negative called a suspect; "definitely lost" cannot move.
const EXPECT_MIN: &str =
    "right=0.85,precision=0.9,recall=0.9,headline=0.9,holder=0.8,lost_precision=1.0,lost_recall=0.9";

#[test]
fn the_stand_in_corpus_runs_every_program_and_writes_its_table() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = TempDir::new("corpus");
    let (work, out) = (dir.path().join("work"), dir.path().join("out"));
    let output = Command::new(python3())
        .arg(root.join("scripts/gpu/corpus/score.py"))
        .arg("--manifest")
        .arg(root.join("scripts/gpu/corpus/standin/corpus.json"))
        .arg("--gpushim")
        .arg(collector())
        .arg("--standins")
        .arg(standins())
        .args(["--jobs", "2", "--expect-min", EXPECT_MIN, "--work"])
        .arg(&work)
        .arg("--out")
        .arg(&out)
        .output()
        .expect("running python3 scripts/gpu/corpus/score.py");
    let text = format!(
        "\n--- stdout ---\n{}--- stderr ---\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "score.py failed ({}){text}", output.status);
    let results = read_json(&out.join("results.json"), &text);
    let programs = results["programs"].as_array().expect("results.json has programs");
    assert_eq!(programs.len(), 28, "{text}");
    // Every program was judged: it built, ran, exited 0 and left a report of the expected shape.
    let errors: Vec<String> = programs
        .iter()
        .filter(|p| !p["error"].is_null())
        .map(|p| format!("{}: {}", p["name"].as_str().unwrap_or("?"), p["error"]))
        .collect();
    assert!(errors.is_empty(), "programs not judged: {errors:?}\n(logs: {}){text}", work.display());
    assert!(programs.iter().all(|p| p["right"].is_boolean()), "{text}");
    // The table: a row per program, then the totals.
    let table = std::fs::read_to_string(out.join("table.txt")).expect("table.txt");
    for p in programs {
        let name = p["name"].as_str().unwrap();
        assert!(table.lines().any(|l| l.starts_with(&format!("{name} "))), "no row for {name} in\n{table}");
    }
    for total in ["right ", "suspect precision ", "suspect recall ", "headline right ", "definitely lost "] {
        assert!(table.lines().any(|l| l.starts_with(total)), "no {total:?} line in\n{table}");
    }
    let md = std::fs::read_to_string(out.join("accuracy.md")).expect("accuracy.md");
    assert!(md.contains("| program | framework | label | got | right | holder | lost (label / ours) |"), "{md}");
    assert!(out.join("corpus-logs.tar.gz").is_file());
    let totals: &Value = &results["totals"];
    assert_eq!((totals["programs"].as_u64(), totals["errors"].as_u64()), (Some(28), Some(0)), "{text}");
}
