//! The words a report uses that a newcomer may not know, each with what it means: one table for
//! the README's "Reading the report" (a test keeps its copy equal to [`markdown`]) and the HTML
//! page, whose tooltips and "Words on this page" list are made from it ([`page_terms`]).

use serde_json::{json, Value};

/// One word of the glossary.
pub struct Term {
    /// The word as the README's table shows it (Markdown: code in backticks).
    pub word: &'static str,
    /// What it means (Markdown).
    pub meaning: &'static str,
    /// Where the page marks the word in its text (reasons, notes, holders, owners): the phrases
    /// it finds there as whole words, matched case-insensitively. Empty: the page marks the word
    /// only where it places it itself (a heading, a column, a number's label) and, for a word of
    /// [`SCAN_MARKS`], in the reachability scan's line.
    pub marks: &'static [&'static str],
}

/// The glossary, in the README's order.
pub const GLOSSARY: &[Term] = &[
    Term {
        word: "site",
        meaning: "one place in the code that allocates: every allocation made with the same stack (`site N`: its number in the report)",
        marks: &[],
    },
    Term {
        word: "suspect",
        meaning: "a site whose live memory kept growing over the run, most live bytes first (memory no pointer reaches is said apart, as definitely lost, and moves a suspect up, but does not make one by itself)",
        marks: &[],
    },
    Term {
        word: "score",
        meaning: "0 to 1: the mean of the share of its allocations never freed and the share of the run its live memory kept rising",
        marks: &[],
    },
    Term {
        word: "\"across 2 sites of one line\"",
        meaning: "one source line reached by several stacks (a loop's first call and the later ones); the numbers after it are those sites",
        marks: &["sites of one line"],
    },
    Term { word: "live", meaning: "allocated and not freed at that moment", marks: &[] },
    Term {
        word: "peak",
        meaning: "the most that was live at any one moment of the run (of a kind, a GPU or a site)",
        marks: &[],
    },
    Term {
        word: "traced",
        meaning: "made by an allocation call the shim saw: the live set; what the driver counts beyond it is untraced",
        marks: &[],
    },
    Term {
        word: "managed",
        meaning: "unified memory (`cudaMallocManaged`), which the driver moves between the host and the GPU",
        marks: &[],
    },
    Term {
        word: "pinned_host",
        meaning: "host memory the GPU can reach directly (`cudaHostAlloc`, a DataLoader's `pin_memory`)",
        marks: &["pinned_host", "pinned host"],
    },
    Term {
        word: "definitely lost",
        meaning: "no pointer to the allocation is left anywhere in the program's memory: nothing can free it any more",
        marks: &["definitely lost"],
    },
    Term {
        word: "lost",
        meaning: "in the scan's line (`N lost`): definitely lost",
        marks: &[],
    },
    Term {
        word: "indirectly lost",
        meaning: "the only pointers to it are in heap blocks that are themselves lost",
        marks: &["indirectly lost"],
    },
    Term {
        word: "possibly lost",
        meaning: "a pointer to it may be in memory the scan could not trust (a library's own block, a stack it could not bound); it may still be freed",
        marks: &["possibly lost"],
    },
    Term {
        word: "reachable",
        meaning: "a pointer to it is still in the program's memory: something keeps it (in Python the holders say which object, when an object holds it; an address kept as a plain number has no holder)",
        marks: &["reachable"],
    },
    Term {
        word: "\"read\"",
        meaning: "in the scan's line (`… MiB read in … ms`): how much of the program's own memory the reachability scan read looking for pointers to the live allocations",
        marks: &[],
    },
    Term {
        word: "heap walk",
        meaning: "a look, at the snapshot or at exit, through the Python objects of the program for those that own GPU memory",
        marks: &["heap walk"],
    },
    Term {
        word: "holders, `held by:`",
        meaning: "the Python objects that keep a site's memory, with the shortest chain of references from a global or a frame: `proj/train.py global 'history' → list[*] → 200 objects`; `[*]` means any index of that list (one line for all its items)",
        marks: &["held by", "[*]"],
    },
    Term {
        word: "no object found, `allocated, no tensor found`",
        meaning: "in the memory by kind: traced memory the heap walk found no Python object for (a library's workspace, memory held from native code), and memory PyTorch counts as allocated that holds no tensor the walk found",
        marks: &["no object found", "no tensor found"],
    },
    Term {
        word: "the interpreter's teardown",
        meaning: "what Python frees as the program exits, after your code has finished",
        marks: &["interpreter's teardown"],
    },
    Term {
        word: "owner, `user code (direct calls)`",
        meaning: "the allocator or library whose frames made a site's allocations (`PyTorch caching allocator`, `cuBLAS`, …); `user code (direct calls)` when none matches: the program called CUDA itself",
        marks: &["user code (direct calls)"],
    },
    Term {
        word: "internal frame",
        meaning: "a frame of the CUDA runtime, the driver, a framework or the language's runtime (libc, the Python interpreter): folded away, so that a site is named by its first frame of your code",
        marks: &["internal frame", "internal frames"],
    },
    Term {
        word: "via",
        meaning: "in a suspect's headline, the library function that the line of your code called and that allocated: `step (proj/train.py:21) via Tensor.backward`; none when your code called CUDA itself",
        marks: &["via"],
    },
    Term {
        word: "untraced",
        meaning: "GPU memory the driver counts for the process that no allocation call made (the CUDA context, loaded kernel modules): not in the live set",
        marks: &["untraced"],
    },
];

/// The words the page marks only in the reachability scan's line (`reachability scan complete:
/// 2 lost, 0 indirectly lost, 3 reachable (9.3 MiB read in 5 ms)`), where they mean what the
/// glossary says (elsewhere "lost" or "read" may be plain words): each glossary `word` and the
/// phrase marked.
pub const SCAN_MARKS: &[(&str, &str)] = &[("lost", "lost"), ("\"read\"", "read")];

/// The glossary as the README's Markdown table, header included, one line each (the test that
/// keeps the README's copy equal is its only user).
#[cfg(test)]
fn markdown() -> String {
    let mut s = String::from("| word | what it means |\n|---|---|\n");
    for t in GLOSSARY {
        s.push_str(&format!("| {} | {} |\n", t.word, t.meaning));
    }
    s
}

/// The glossary for the page: `word` and `meaning` in plain text (the Markdown's backticks
/// dropped), the phrases to mark, and those to mark in the scan's line only ([`SCAN_MARKS`]).
pub fn page_terms() -> Value {
    let plain = |s: &str| s.replace('`', "");
    Value::Array(
        GLOSSARY
            .iter()
            .map(|t| {
                let scan: Vec<&str> = SCAN_MARKS.iter().filter(|(w, _)| *w == t.word).map(|(_, m)| *m).collect();
                json!({ "word": plain(t.word), "meaning": plain(t.meaning), "marks": t.marks, "scan_marks": scan })
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_readme_holds_the_glossary_as_it_is_here() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md");
        let readme = std::fs::read_to_string(path).unwrap();
        let start = readme.find("| word | what it means |").expect("the README's glossary table");
        let end = readme[start..].find("\n\n").map_or(readme.len(), |e| start + e + 1);
        assert_eq!(
            &readme[start..end],
            markdown(),
            "README.md's glossary differs from collector/src/render/glossary.rs: copy markdown()'s table there"
        );
    }

    #[test]
    fn page_terms_are_plain_text_and_every_mark_is_a_phrase() {
        let terms = page_terms();
        let terms = terms.as_array().unwrap();
        assert_eq!(terms.len(), GLOSSARY.len());
        for t in terms {
            assert!(!t["word"].as_str().unwrap().contains('`') && !t["meaning"].as_str().unwrap().contains('`'));
            assert!(t["marks"].as_array().unwrap().iter().all(|m| !m.as_str().unwrap().trim().is_empty()));
        }
        let scan: Vec<(&str, &str)> = terms
            .iter()
            .flat_map(|t| {
                t["scan_marks"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(move |m| (t["word"].as_str().unwrap(), m.as_str().unwrap()))
            })
            .collect();
        assert_eq!(scan, [("lost", "lost"), ("\"read\"", "read")], "every scan mark is of a glossary word");
        assert_eq!(terms[2]["word"], "score");
        assert!(terms[2]["meaning"].as_str().unwrap().starts_with("0 to 1: the mean"));
    }
}
