// gpushim's diff page: reads `gpushim diff --format json`'s document from #data and shows the
// totals and the sites that changed, old and new side by side. Its labels (`D.labels`) and the
// glossary's words with their meanings as tooltips (terms.js) come with the data.
"use strict";
(function () {
  const D = JSON.parse(document.getElementById("data").textContent);
  const app = document.getElementById("app");
  function bytes(n) {
    if (n == null) return "";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    let v = Math.abs(n);
    while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
    return (n < 0 ? "-" : n > 0 ? "" : "") + (i === 0 ? v : v.toFixed(1)) + " " + units[i];
  }
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v; else e.setAttribute(k, v);
    }
    for (const c of children) if (c != null) e.append(c instanceof Node ? c : String(c));
    return e;
  }
  const { term, explain } = gpushimTerms(D.glossary || [], el);
  // A label of `D.labels`: its words, and its glossary words as terms.
  const label = (pieces) => pieces.map((p) => (typeof p === "string" ? p : term(p.term, p.shown)));
  // The sides in words (`pid 7 snapshot 1 "half" (10.000 s)`), as gpushim diff's text names them.
  app.append(el("h1", {}, "gpushim diff"));
  app.append(el("div", { class: "sub" }, "old: " + D.sides.old + " \u2192 new: " + D.sides.new + (D.same_process ? " \u00b7 same process" : "")));

  const totals = el("table", { id: "totals" }, el("tr", {}, el("th", {}, ""), el("th", { class: "num" }, "old"), el("th", { class: "num" }, "new"), el("th", { class: "num" }, "growth")));
  // The totals' rows, each labelled in words.
  for (const [k, words] of D.labels.totals) {
    const c = D.totals[k];
    if (!c) continue;
    const f = /bytes$/.test(k) ? bytes : (v) => v;
    totals.append(el("tr", {}, el("td", {}, ...label(words)), el("td", { class: "num" }, f(c.old)), el("td", { class: "num" }, f(c.new)), el("td", { class: "num" }, (c.growth > 0 ? "+" : "") + f(c.growth))));
  }
  app.append(el("h2", {}, "Totals"), totals);

  app.append(el("h2", {}, term("site", "Sites"), " that changed (" + D.sites.length + "; " + D.unchanged_sites + " unchanged)"));
  const max = Math.max(1, ...D.sites.map((s) => Math.max((s.old || {}).live_bytes || 0, (s.new || {}).live_bytes || 0)));
  const bar = (b, cls) => el("span", { class: "bar " + cls, style: "width:" + Math.round(200 * (b || 0) / max) + "px" });
  const t = el("table", { id: "diff-sites" }, el("tr", {}, ...D.labels.columns.map((h) => el("th", {}, ...label(h)))));
  for (const s of D.sites) {
    const o = (s.old || {}).live_bytes || 0;
    const n = (s.new || {}).live_bytes || 0;
    t.append(el("tr", {},
      el("td", { class: "status-" + s.status }, s.status), el("td", {}, s.label),
      el("td", { class: "num" }, bytes(o)), el("td", {}, bar(o, "old")),
      el("td", { class: "num" }, bytes(n)), el("td", {}, bar(n, "new")),
      el("td", { class: "num status-" + s.status }, (s.growth_bytes > 0 ? "+" : "") + bytes(s.growth_bytes))));
  }
  app.append(t);
  if (D.holders && D.holders.length) {
    app.append(el("h2", {}, term("holders, held by:", "Holders"), " that grew"));
    app.append(el("ul", {}, ...D.holders.map((h) => el("li", {}, explain(h.label + ": +" + bytes(h.bytes.growth))))));
  }
  if (D.notes && D.notes.length) app.append(el("ul", { class: "notes" }, ...D.notes.map((n) => el("li", {}, explain(n)))));
})();
