// gpushim's report page: reads the report from the JSON block #data and draws the header, live
// bytes over time (uPlot), the flame graph (d3-flame-graph), the suspects and the sites table.
"use strict";
(function () {
  const R = JSON.parse(document.getElementById("data").textContent);
  const app = document.getElementById("app");
  const sitesById = new Map(R.sites.map((s) => [s.id, s]));

  // The kinds of memory in words (collector/src/report/kinds.rs, KIND_NAMES).
  const kindWords = {
    parameters: "parameters", gradients: "gradients", optimizer_state: "optimizer state",
    activations: "activations saved by autograd", other_tensors: "other tensors",
    allocated_no_tensor: "allocated, no tensor found", cached_free: "cached free", no_object: "no object found",
  };

  // ---- helpers ----
  function bytes(n) {
    if (n == null) return "";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    let v = Math.abs(n);
    while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
    return (n < 0 ? "-" : "") + (i === 0 ? v : v.toFixed(1)) + " " + units[i];
  }
  // Ticks of the bytes axis at round binary steps (a power of two bytes: 256 MiB, 512 MiB, 1 GiB,
  // ...), about five of them.
  function binarySplits(u, axisIdx, min, max) {
    const span = max - min;
    if (!(span > 0)) return [min];
    const step = Math.pow(2, Math.ceil(Math.log2(span / 5)));
    const out = [];
    for (let v = Math.ceil(min / step) * step; v <= max; v += step) out.push(v);
    return out;
  }
  // n and a noun, with an "s" unless n is 1.
  function count(n, noun) {
    return n + " " + noun + (n === 1 ? "" : "s");
  }
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v; else e.setAttribute(k, v);
    }
    for (const c of children) {
      if (c != null) e.append(c instanceof Node ? c : String(c));
    }
    return e;
  }
  function section(title, id) {
    const s = el("section", { id });
    s.append(el("h2", {}, title));
    app.append(s);
    return s;
  }

  // ---- the glossary (collector/src/render/glossary.rs, the README's table): terms.js ----
  const glossary = R.glossary || [];
  const { term, explain, explainScan, used } = gpushimTerms(glossary, el);
  // A frame's file or module as the text report names it: a file by its directory and its name
  // (`file_name`, made by the collector), a module by its name; the full path is the title.
  const placeName = (f) => f.file ? f.file_name || f.file : f.module ? f.module.split("/").pop() : "";
  function frameText(f) {
    // A notebook cell as the notebook names it (`In [4] line 2`), as the text report does.
    if (f.cell) return f.function + " (" + f.cell + ")";
    const place = f.file ? placeName(f) + (f.line != null ? ":" + f.line : "")
      : (f.module ? f.module.split("/").pop() + "+" + (f.offset || "") : "");
    return (f.function === "??" && place ? "" : f.function) + (place ? " (" + place + ")" : "");
  }
  function frameName(f) {
    if (f.function && f.function !== "??") return f.function;
    if (f.module) return f.module.split("/").pop() + "+" + (f.offset || "?");
    return "??";
  }
  // A stack as a list, innermost first; internal frames folded into a <details> unless shown.
  function stackList(frames) {
    const ol = el("ol", { class: "stack" });
    let hidden = [];
    const flush = () => {
      if (!hidden.length) return;
      const d = el("details", {}, el("summary", {}, hidden.length + " ", term("internal frame", "internal frame" + (hidden.length > 1 ? "s" : ""))));
      const inner = el("ol", { class: "stack" });
      hidden.forEach((f) => inner.append(el("li", { class: "internal", title: f.file || f.module }, frameText(f))));
      d.append(inner);
      ol.append(el("li", { class: "internal" }, d));
      hidden = [];
    };
    for (const f of frames) {
      if (f.internal) { hidden.push(f); continue; }
      flush();
      ol.append(el("li", { title: f.file || f.module }, frameText(f)));
    }
    flush();
    return ol;
  }

  // ---- header ----
  const what = R.snapshot != null ? "snapshot " + R.snapshot : R.reason;
  app.append(el("h1", {}, "gpushim: " + R.program));
  app.append(el("div", { class: "sub" },
    "pid " + R.pid + " \u00b7 " + what + " \u00b7 " + R.duration_s.toFixed(3) + " s" +
    (R.start_unix_ns ? " \u00b7 started " + new Date(R.start_unix_ns / 1e6).toISOString() : "")));
  const cards = el("div", { class: "cards", id: "totals" });
  // A card: a value over its label (text or nodes) and an optional second line (text or nodes).
  const card = (label, value, sub) => cards.append(el("div", { class: "card" }, el("b", {}, value),
    el("span", {}, ...[].concat(label)), sub ? el("span", { class: "card-sub" }, ...[].concat(sub)) : null));
  // What the reachability scan found definitely lost comes first, as on stderr and in the text.
  const scan = R.reachability;
  if (scan && scan.definitely_lost_count > 0) {
    card([term("definitely lost")], bytes(scan.definitely_lost_bytes), count(scan.definitely_lost_count, "allocation"));
  }
  const live = term("live");
  card([live], bytes(R.totals.live_bytes), count(R.totals.live_count, "allocation"));
  card([term("peak")], bytes(R.totals.peak_live_bytes));
  const peak = (n) => [term("peak"), " " + bytes(n)];
  for (const [k, t] of Object.entries(R.kinds)) {
    if (!t.peak_live_bytes) continue;
    const kind = k === "pinned_host" ? term("pinned_host", "pinned host") : k === "managed" ? term("managed") : k;
    card([kind, " ", term("live")], bytes(t.live_bytes), peak(t.peak_live_bytes));
  }
  for (const d of R.devices) card(["GPU " + d.ordinal + " ", term("live")], bytes(d.live_bytes), peak(d.peak_live_bytes));
  // The driver's view of each GPU (NVML), when it was sampled: what no allocation call made.
  for (const g of R.gpu_memory || []) {
    if (g.untraced_bytes != null) card(["GPU " + g.ordinal + " ", term("untraced")], bytes(g.untraced_bytes), "the driver counts " + bytes(g.driver_bytes));
  }
  // A card's value reads with its label ("1 suspect", "2 suspects"): the label agrees with it.
  const noun = (n, word) => word + (n === 1 ? "" : "s");
  card([term("suspect", noun(R.suspects.length, "suspect"))], R.suspects.length);
  card(noun(R.totals.failed_count, "failed allocation"), R.totals.failed_count);
  app.append(cards);
  // The scan's line (and note), in the words of stderr and the text report (render/text.rs).
  if ((R.scan_lines || []).length) app.append(el("div", { class: "sub", id: "scan" }, ...R.scan_lines.map((l) => el("div", {}, explainScan(l)))));
  // Owners, when the report has them: a per-site `owner`, and any per-GPU owners table.
  const owned = new Map();
  for (const s of R.sites) {
    if (s.owner != null) owned.set(s.owner, (owned.get(s.owner) || 0) + s.live_bytes);
  }
  if (owned.size) {
    const ow = el("div", { class: "cards", id: "owners" });
    [...owned.entries()].sort((a, b) => b[1] - a[1]).forEach(([o, b]) => ow.append(el("div", { class: "card" }, el("b", {}, bytes(b)), el("span", {}, explain(o)))));
    app.append(el("h2", {}, term("owner, user code (direct calls)", "Owners"), " of the live memory"), ow);
  }
  if (Array.isArray(R.owners) && R.owners.length && typeof R.owners[0] === "object") {
    const keys = Object.keys(R.owners[0]);
    const t = el("table", {}, el("tr", {}, ...keys.map((k) => el("th", {}, k))));
    R.owners.forEach((row) => t.append(el("tr", {}, ...keys.map((k) => el("td", {}, typeof row[k] === "object" ? JSON.stringify(row[k]) : row[k])))));
    app.append(t);
  }
  // Device memory by kind (`memory_kinds`, from the heap walk): per GPU, each kind with its
  // bytes and the lines that allocated its objects.
  for (const d of R.memory_kinds || []) {
    const t = el("table", { class: "kinds", id: "kinds-" + d.ordinal },
      el("tr", {}, el("th", {}, "kind"), el("th", {}, "bytes"), el("th", {}, "objects"), el("th", {}, "top lines")));
    for (const k of d.kinds) {
      const name = k.kind === "workspace" ? explain(k.owner) : k.kind === "untraced" ? term("untraced") : explain(kindWords[k.kind] || k.kind);
      const lines = el("ul", {}, ...(k.lines || []).map((l) => el("li", {}, bytes(l.bytes) + "  " + l.line + " (" + count(l.objects, "object") + ")")));
      t.append(el("tr", {}, el("td", {}, name), el("td", {}, bytes(k.bytes)), el("td", {}, k.objects || ""), el("td", {}, lines)));
    }
    const of = ["tensors " + bytes(d.tensor_bytes) + " of " + bytes(d.traced_bytes) + " ", term("traced"),
      d.driver_bytes != null ? ", the driver counts " + bytes(d.driver_bytes) : ""];
    app.append(el("h2", {}, "GPU " + d.ordinal + " by kind of memory"), el("div", { class: "sub" }, "From the ", term("heap walk"), ": ", ...of), t);
  }
  const notes = R.notes.concat(R.findings || []);
  if (notes.length) app.append(el("ul", { class: "notes" }, ...notes.map((n) => el("li", {}, explain(n)))));

  // ---- live bytes over time ----
  const chartSec = section("Live bytes over time", "timeline");
  // Red lines mark the out-of-memory failures and the moment of a snapshot or out-of-memory
  // report; the page speaks of them only when it draws any.
  const oomTimes = R.failures.filter((f) => f.result === 2).map((f) => f.ts_s);
  const markers = oomTimes.slice();
  if (R.reason === "snapshot" || R.reason === "oom") markers.push(R.duration_s);
  const marked = [];
  if (oomTimes.length) marked.push(count(oomTimes.length, "out-of-memory failure"));
  if (R.reason === "snapshot") marked.push("the snapshot");
  if (R.reason === "oom") marked.push("this report");
  const red = markers.length ? " Red " + (markers.length === 1 ? "line" : "lines") + ": " + marked.join(" and ") + "." : "";
  chartSec.append(el("div", { class: "sub" }, "Drag to zoom, double-click to reset; hover for values." + red));
  const chartBox = el("div", { id: "chart" });
  chartSec.append(chartBox);
  const pts = R.timeline.points;
  const xs = pts.map((p) => p.t_s);
  const data = [xs];
  const series = [{ label: "seconds", value: (u, v) => v == null ? "" : v.toFixed(4) + " s" }];
  const colors = ["#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f", "#d62728"];
  const add = (label, values, dash) => {
    data.push(values);
    series.push({ label, stroke: colors[(series.length - 1) % colors.length], width: 1.5, dash, value: (u, v) => bytes(v) });
  };
  // A line drawn over another with the same values would hide it: a GPU whose line is the
  // device total (the only GPU, nothing managed) is named in the total's label instead.
  const devs = R.timeline.devices;
  const same = (i, k) => pts.every((p) => (p.devices[i] || 0) === (p.kinds[k] || 0));
  const merged = devs.length === 1 && same(0, 0);
  ["device", "managed", "pinned host"].forEach((k, i) => {
    const label = i === 0 && merged ? "device (GPU " + devs[0] + ")" : k;
    if (pts.some((p) => p.kinds[i])) add(label, pts.map((p) => p.kinds[i]));
  });
  if (!merged) devs.forEach((d, i) => add("GPU " + d, pts.map((p) => p.devices[i])));
  // Suspects as their own lines: a series holds exact observations, so a site's value at a
  // time is its latest observation at or before it; a suspect of several sites is their sum,
  // as its card's live bytes are.
  R.suspects.slice(0, 5).forEach((sp, k) => {
    const head = sitesById.get(sp.site);
    const ids = [...new Set([sp.site, ...(sp.sites || []), ...(sp.line_sites || [])])];
    const members = ids.map((id) => sitesById.get(id)).filter((s) => s && s.series.length);
    if (!head || !members.length) return;
    const at = members.map(() => -1);
    add("#" + (k + 1) + " " + head.label, xs.map((x) => {
      let sum = null;
      members.forEach((s, m) => {
        while (at[m] + 1 < s.series.length && s.series[at[m] + 1][0] <= x) at[m]++;
        if (at[m] >= 0) sum = (sum || 0) + s.series[at[m]][1];
      });
      return sum;
    }), [6, 3]);
  });
  if (xs.length) {
    const plot = new uPlot({
      width: chartBox.clientWidth || 960,
      height: 320,
      scales: { x: { time: false } },
      axes: [{ label: "seconds after the first event" }, { size: 80, splits: binarySplits, values: (u, vals) => vals.map((v) => bytes(v).replace(".0 ", " ")) }],
      series,
      hooks: {
        // The legend shows the values at the end while the pointer is not over the chart.
        ready: [(u) => u.setLegend({ idx: xs.length - 1 })],
        setCursor: [(u) => { if (u.cursor.idx == null) u.setLegend({ idx: xs.length - 1 }); }],
        draw: [(u) => {
          const ctx = u.ctx;
          ctx.save();
          ctx.strokeStyle = "#c0392b";
          ctx.lineWidth = 1;
          for (const t of markers) {
            const x = u.valToPos(t, "x", true);
            if (x < u.bbox.left || x > u.bbox.left + u.bbox.width) continue;
            ctx.beginPath();
            ctx.moveTo(x, u.bbox.top);
            ctx.lineTo(x, u.bbox.top + u.bbox.height);
            ctx.stroke();
          }
          ctx.restore();
        }],
      },
    }, data, chartBox);
    // As wide as its box, as the flame graph.
    new ResizeObserver(() => {
      if (chartBox.clientWidth > 0 && chartBox.clientWidth !== plot.width) plot.setSize({ width: chartBox.clientWidth, height: 320 });
    }).observe(chartBox);
    window.gpushimChart = plot;
  } else {
    chartBox.append("No timeline in this report.");
  }

  // ---- flame graph ----
  const flameSec = section("Flame graph", "flamegraph");
  const weight = el("select", { id: "flame-weight" }, el("option", { value: "live_bytes" }, "live bytes"), el("option", { value: "alloc_bytes" }, "bytes allocated (all allocations)"));
  const internal = el("input", { type: "checkbox", id: "flame-internal" });
  const search = el("input", { type: "search", id: "flame-search", placeholder: "search function or file" });
  const reset = el("button", { id: "flame-reset" }, "reset zoom");
  flameSec.append(el("div", { class: "controls" }, el("label", {}, "width: ", weight), el("label", {}, internal, " show ", term("internal frame", "internal frames")), search, reset));
  flameSec.append(el("div", { class: "sub" }, "Click a frame to zoom in; outermost frame at the bottom."));
  const details = el("div", { id: "flame-details" });
  const flameBox = el("div", { id: "flame" });
  flameSec.append(flameBox, details);

  // The tree of all sites' stacks, outermost frame first; `value` is the total under a node.
  function tree(key, showInternal) {
    const root = { name: "all", value: 0, children: [] };
    for (const s of R.sites) {
      const v = s[key];
      if (!v) continue;
      let frames = s.frames.slice().reverse();
      if (!showInternal && frames.some((f) => !f.internal)) frames = frames.filter((f) => !f.internal);
      let node = root;
      root.value += v;
      const names = frames.length ? frames : [{ function: s.no_backtrace ? "[no backtrace]" : "[site " + s.name + "]" }];
      for (const f of names) {
        const name = frameName(f);
        let child = node.children.find((c) => c.name === name);
        if (!child) {
          // Named as the rest of the page names it (`placeName`); searched by the full path.
          child = { name, file: placeName(f), path: f.file || f.module || "", value: 0, children: [] };
          node.children.push(child);
        }
        child.value += v;
        node = child;
      }
    }
    return root;
  }
  // The graph is as wide as its box: laid out at the box's width now, and again whenever the box
  // changes width (a resized window, a scroll bar that comes or goes), zoom kept.
  const cellHeight = 20;
  const flame = flamegraph()
    .width(flameBox.clientWidth || 960)
    .cellHeight(cellHeight)
    .minFrameSize(2)
    .transitionDuration(0)
    .label((d) => d.data.name + (d.data.file ? " (" + d.data.file + ")" : "") + ": " + bytes(d.value))
    .setSearchMatch((d, term) => term !== "" && (d.data.name.includes(term) || (d.data.path || "").includes(term)))
    .setDetailsElement(details)
    .setSearchHandler((found, sum, total) => {
      details.textContent = found.length ? "search: " + count(found.length, "frame") + ", " + bytes(sum) + " of " + bytes(total) : "";
    });
  // Rows of a tree: its deepest frame's depth, the root's row included.
  const rows = (node) => 1 + Math.max(0, ...node.children.map(rows));
  // The graph as high as its rows (the library leaves three empty rows above them otherwise).
  function fit(root) {
    const h = rows(root) * cellHeight;
    flame.height(h);
    const svg = flameBox.querySelector("svg");
    if (svg) svg.setAttribute("height", h);
  }
  const draw = () => gpushimAtOnce(() => {
    const root = tree(weight.value, internal.checked);
    fit(root);
    flame.update(root);
  });
  gpushimAtOnce(() => {
    const root = tree("live_bytes", false);
    fit(root);
    d3.select(flameBox).datum(root).call(flame);
  });
  weight.addEventListener("change", draw);
  internal.addEventListener("change", draw);
  search.addEventListener("input", () => gpushimAtOnce(() => (search.value ? flame.search(search.value) : flame.clear())));
  reset.addEventListener("click", () => gpushimAtOnce(() => flame.resetZoom()));
  let flameWidth = flame.width();
  new ResizeObserver(() => {
    const w = flameBox.clientWidth;
    if (w > 0 && w !== flameWidth) {
      flameWidth = w;
      gpushimAtOnce(() => flame.width(w).update());
    }
  }).observe(flameBox);
  window.gpushimFlame = flame;

  // ---- suspects ----
  const susSec = section("Leak suspects (" + R.suspects.length + ")", "suspects");
  susSec.querySelector("h2").replaceChildren("Leak ", term("suspect", "suspects"), " (" + R.suspects.length + ")");
  if (!R.suspects.length) susSec.append(el("p", {}, "No site's live bytes kept rising."));
  R.suspects.forEach((sp, k) => {
    const s = sitesById.get(sp.site);
    const box = el("div", { class: "suspect" });
    box.append(el("div", {}, el("b", {}, "#" + (k + 1) + " " + (s ? s.label : "site " + sp.site)),
      " \u2014 " + bytes(sp.live_bytes) + " ", term("live"), " in " + count(sp.live_count, "allocation") + ", ", term("score"), " " + sp.score_text));
    box.append(el("div", { class: "reason" }, explain(sp.reason)));
    if (s) box.append(stackList(s.frames));
    // Who holds its memory, the text report's lines: for a suspect of the sites of one line,
    // each member site's, headed by its site.
    const held = sp.holder_lines || [];
    if (held.length) {
      box.append(el("div", { class: "holders" }, term("holders, held by:", "Holders:"), el("ul", {}, ...held.map((l) => el("li", {}, explain(l))))));
    }
    susSec.append(box);
  });

  // ---- all sites ----
  const siteSec = section("All sites (" + R.sites.length + ")", "sites");
  const hasOwner = R.sites.some((s) => s.owner != null);
  const cols = [
    ["id", "site", false], ["label", "first user frame", false], ["kind", "kind", false],
    ["live_bytes", "live", true], ["live_count", "live #", true], ["peak_live_bytes", "peak", true],
    ["alloc_count", "allocs", true], ["alloc_bytes", "allocated", true], ["free_count", "frees", true],
  ];
  if (hasOwner) cols.push(["owner", "owner", false]);
  const table = el("table", { id: "sites-table" });
  const head = el("tr");
  const body = el("tbody");
  let order = { key: "live_bytes", desc: true };
  // A cell of site `s`: its id as `name` (a dash for the site without backtrace, whose tooltip
  // says why), bytes in units, kinds and owners with their glossary words marked.
  const fmt = (key, s) => {
    const v = s[key];
    if (key === "id") return s.no_backtrace ? el("span", { title: s.no_backtrace }, s.name) : s.name;
    return /bytes$/.test(key) ? bytes(v) : key === "kind" || key === "owner" ? explain(v == null ? "" : v) : v;
  };
  function fill() {
    const rows = R.sites.slice().sort((a, b) => {
      const x = a[order.key], y = b[order.key];
      const c = typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y));
      return order.desc ? -c : c;
    });
    body.replaceChildren(...rows.map((s) => el("tr", {}, ...cols.map(([k, , num]) => el("td", { class: num ? "num" : "" }, fmt(k, s))))));
  }
  cols.forEach(([k, label, num]) => {
    // Headers that are glossary words carry its tooltip.
    const word = { id: "site", live_bytes: "live", peak_live_bytes: "peak", owner: "owner, user code (direct calls)" }[k];
    const th = el("th", { class: num ? "num" : "", "data-key": k }, word ? term(word, label) : label);
    th.addEventListener("click", () => {
      order = { key: k, desc: order.key === k ? !order.desc : num };
      fill();
    });
    head.append(th);
  });
  table.append(el("thead", {}, head), body);
  siteSec.append(table);
  fill();

  // ---- the words of this page: only those it shows (the README has them all) ----
  const words = section("Words on this page", "glossary");
  words.append(el("dl", { class: "glossary" }, ...used().flatMap((t) => [el("dt", {}, t.word), el("dd", {}, t.meaning)])));
})();
