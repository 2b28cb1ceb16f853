// The glossary's tooltips on gpushim's pages (the report and the diff): loaded before the page's
// script, which calls gpushimTerms with the glossary of its data (collector/src/render/glossary.rs,
// the README's table) and its element maker `el(tag, attrs, ...children)`.
"use strict";
// `term(word, shown)`: an element showing `shown` (the word unless given) with the word's meaning
// as its tooltip; `explain(text)`: `text` with every glossary mark in it made such a term;
// `explainScan(text)`: the same for the reachability scan's line, where the glossary's
// `scan_marks` are marked too ("2 lost", "read in 5 ms"); `used`: the glossary's words placed so
// far, in the glossary's order (a page lists only those).
function gpushimTerms(glossary, el) {
  const termByWord = new Map(glossary.map((t) => [t.word, t]));
  const placed = new Set();
  // `shown` (the word itself unless given) with the word's meaning as its tooltip.
  function term(word, shown) {
    const t = termByWord.get(word);
    if (!t) {
      console.error("gpushim: no glossary word " + JSON.stringify(word));
      return shown || word;
    }
    placed.add(word);
    return el("abbr", { class: "term", title: t.meaning, tabindex: "0" }, shown || word);
  }
  const used = () => glossary.filter((t) => placed.has(t.word));
  const reEscape = (m) => m.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  // A function that gives `text` as a span in which every phrase of `marksOf(term)` is a term
  // with its tooltip. The phrases form one pattern, longest first; a phrase that starts or ends
  // with a word character matches only as a whole word there ("reachable", not in "unreachable").
  function marker(marksOf) {
    const marks = glossary.flatMap((t) => marksOf(t).map((m) => [m, t])).sort((a, b) => b[0].length - a[0].length);
    const markOf = new Map(marks.map(([m, t]) => [m.toLowerCase(), t]));
    const markRe = marks.length ? new RegExp(marks.map(([m]) =>
      (/^\w/.test(m) ? "(?<!\\w)" : "") + reEscape(m) + (/\w$/.test(m) ? "(?!\\w)" : "")).join("|"), "gi") : null;
    return (text) => {
      text = String(text);
      const span = el("span");
      let at = 0;
      if (markRe) {
        for (const m of text.matchAll(markRe)) {
          span.append(text.slice(at, m.index), term(markOf.get(m[0].toLowerCase()).word, m[0]));
          at = m.index + m[0].length;
        }
      }
      span.append(text.slice(at));
      return span;
    };
  }
  const explain = marker((t) => t.marks);
  const explainScan = marker((t) => t.marks.concat(t.scan_marks || []));
  return { term, explain, explainScan, used };
}
