"""Compares each case's gpushim report with its framework's own counters; prints a Markdown table.

Usage: python3 compare.py RUN_DIR   (RUN_DIR/<case>/ holds truth.json, the reports, stdout, stderr)
"""

import glob
import json
import os
import re
import sys
import traceback

MIB = 1 << 20
RUN = None  # the RUN_DIR argument, set by main()
rows = []


def read_json(path):
    with open(path) as f:
        return json.load(f)


def load(case):
    d = os.path.join(RUN, case)
    finals = [
        f
        for f in glob.glob(os.path.join(d, "gpushim-*.json"))
        if "-snapshot-" not in f and "-oom-" not in f and not f.endswith((".holders.json", ".reach.json", ".sd.json"))
    ]
    snaps = sorted(
        f
        for f in glob.glob(os.path.join(d, "gpushim-*-snapshot-*.json"))
        if not f.endswith((".holders.json", ".reach.json"))
    )
    truth = {}
    if os.path.exists(os.path.join(d, "truth.json")):
        truth = read_json(os.path.join(d, "truth.json"))
    reports = [read_json(f) for f in finals]
    # the report of the process that did the work: the one with most allocations
    report = max(reports, key=lambda r: r["totals"]["alloc_count"]) if reports else None
    snap = read_json(snaps[0]) if snaps else None
    return truth, report, snap


def load_holders(case, at="snapshot"):
    """The heap walk's companion file of the case's first snapshot (`at="snapshot"`) or of its
    final report (`at="exit"`, the process with most objects found), or None."""
    d = os.path.join(RUN, case)
    if at == "snapshot":
        files = sorted(glob.glob(os.path.join(d, "gpushim-*-snapshot-*.holders.json")))
    else:
        files = [f for f in glob.glob(os.path.join(d, "gpushim-*.holders.json")) if "-snapshot-" not in f]
    hs = [read_json(f) for f in files]
    if at != "snapshot":
        hs.sort(key=lambda h: -h["walk"]["objects_found"])
    return hs[0] if hs else None


def holder_lines(h):
    """Every holder line of a companion file, over its sites and its unattributed objects,
    with the lines of the same path summed: {(how, path...): [objects, bytes, line]}."""
    out = {}
    for s in h["sites"] + [h["unattributed"]]:
        for ln in s["holders"]:
            k = (ln["how"], *ln["path"], ln.get("saved_for") or "")
            e = out.setdefault(k, [0, 0, ln])
            e[0] += ln["objects"]
            e[1] += ln["bytes"]
    return out


def quote(line):
    return line["text"].replace("|", "/") if line else "none"


def mib(b):
    return "n/a" if b is None else f"{b / MIB:.2f} MiB"


def row(case, what, expected, measured, ok, note=""):
    rows.append((case, what, expected, measured, "PASS" if ok else "FAIL", note))


def kind(r, k, f="live_bytes"):
    return r["kinds"][k][f] if r else None


def first_frame(r, site_id):
    for s in r["sites"]:
        if s["id"] == site_id:
            for f in s["frames"]:
                if not f.get("internal") and f.get("function") not in (None, "??"):
                    loc = f"{f.get('file') or ''}:{f.get('line') or ''}".strip(":")
                    return f"{f['function']} {os.path.basename(loc)}".strip()
            return "(no symbolized frame)"
    return "?"


def gpu_live(r, ordinal):
    """Live bytes the report gives GPU `ordinal`, 0 when it lists none for it."""
    return next((d["live_bytes"] for d in r["devices"] if d["ordinal"] == ordinal), 0)


def one_gpu_row(case, truth):
    """The row of a two-GPU case run on a machine with fewer GPUs."""
    row(case, "needs two GPUs", "2", truth["gpus"], True, "not run on this machine")


def apis(r):
    return sorted({a for s in r["sites"] for a in s["apis"]}) if r else []


def top_suspect(r):
    if not r or not r["suspects"]:
        return None, "no suspect"
    s = r["suspects"][0]
    return s, first_frame(r, s["site"])


def missing(case):
    if not os.path.isdir(os.path.join(RUN, case)):
        return  # not selected in this run
    row(case, "report written", "yes", "no", False, "see stderr in logs")


def torch_rows(case, live_vs="reserved", at_snapshot=False):
    t, r, s = load(case)
    if not r or (at_snapshot and not s):
        return missing(case)
    live = kind(s if at_snapshot else r, "device")
    when = "at snapshot" if at_snapshot else "at exit"
    row(
        case,
        f"device live == torch {live_vs} ({when})",
        mib(t.get(live_vs)),
        mib(live),
        live == t.get(live_vs),
        f"apis {apis(r)}",
    )
    if "max_reserved" in t and live_vs == "reserved":
        peak = kind(r, "device", "peak_live_bytes")
        row(case, "device peak >= max_memory_reserved", mib(t["max_reserved"]), mib(peak), peak >= t["max_reserved"])


def holder_checks():
    """Issue 12's cases: who holds the memory, read from the heap walk's companion files."""
    t, r, _ = load("S1")
    h = load_holders("S1")
    if r and h:
        auto = [v for k, v in holder_lines(h).items() if k[0] == "autograd"]
        best = max(auto, key=lambda v: v[1]) if auto else None
        ln = best[2] if best else None
        ok = (
            best is not None
            and "local 'total_aux'" in ln["path"][0]
            and ln["graph_nodes"] == t["aux_graph_nodes"]
            and ln.get("saved_for") == "AbsBackward0"
            and best[0] == t["aux_saved_tensors"]
            and best[1] == t["aux_saved_bytes"]
        )
        row(
            "S1",
            "holder: saved by autograd, path names 'total_aux', graph size",
            f"'total_aux', {t['aux_graph_nodes']} nodes, {t['aux_saved_tensors']} tensors, {mib(t['aux_saved_bytes'])}",
            quote(ln),
            ok,
            f"walk {h['walk']['message']} in {h['walk']['elapsed_s']:.3f} s",
        )
    elif r:
        missing_holders("S1")
    t, r, _ = load("S2")
    h = load_holders("S2", at="exit")
    if r and h and "preds" in t:
        got = holder_lines(h).get(("path", "gpu/cases.py global 'kept'", "list[*]", ""))
        row(
            "S2",
            "holder: the list of predictions",
            f"gpu/cases.py global 'kept' → list[*]: {t['preds']} tensors, {mib(t['pred_bytes'])}",
            f"{got[0]} tensors, {mib(got[1])}" if got else "no such line",
            got is not None and got[0] == t["preds"] and got[1] == t["pred_bytes"],
            quote(got[2] if got else None),
        )
    elif r:
        missing_holders("S2")
    t, r, _ = load("H_hook")
    h = load_holders("H_hook")
    if r and h:
        cyc = [v for k, v in holder_lines(h).items() if k[0] == "cycle"]
        got = sum(v[1] for v in cyc)
        row(
            "H_hook",
            "forward hook over its module, GC off: an unreachable cycle with its bytes",
            mib(t["cycle_bytes"]),
            mib(got),
            got == t["cycle_bytes"] and t.get("gc_enabled_after") is False,
            quote(cyc[0][2] if cyc else None),
        )
    elif os.path.isdir(os.path.join(RUN, "H_hook")):
        missing_holders("H_hook")
    t, r, _ = load("H_optimizer")
    h = load_holders("H_optimizer")
    if r and h:
        lines = holder_lines(h)
        by_opt = [v for k, v in lines.items() if k[0] == "path" and any("Adam" in p for p in k[1:])]
        got = sum(v[1] for v in by_opt)
        row(
            "H_optimizer",
            "old model's parameters and Adam state held by the optimizer",
            mib(t["old_bytes"]),
            mib(got),
            got == t["old_bytes"] and all("global 'opt'" in v[2]["path"][0] for v in by_opt),
            "; ".join(quote(v[2]) for v in by_opt[:3]),
        )
    elif os.path.isdir(os.path.join(RUN, "H_optimizer")):
        missing_holders("H_optimizer")
    for case, name in (("H_cupy", "cache_by_step"), ("H_jax", "jax_history")):
        t, r, _ = load(case)
        h = load_holders(case)
        if not (r and h):
            if os.path.isdir(os.path.join(RUN, case)):
                missing_holders(case)
            continue
        want = ("path", f"gpu/cases.py global '{name}'", "dict[*]" if case == "H_cupy" else "list[*]", "")
        got = holder_lines(h).get(want)
        row(
            case,
            f"holder: global '{name}'",
            f"{t['arrays']} arrays, {mib(t['array_bytes'])}",
            f"{got[0]} arrays, {mib(got[1])}" if got else "no such line",
            got is not None and got[0] == t["arrays"] and got[1] == t["array_bytes"],
            quote(got[2] if got else None),
        )
    t, r, _ = load("H_torch_cached")
    h = load_holders("H_torch_cached")
    if r and h:
        ts = [s for s in h["sites"] if s.get("in_use_from") == "torch"]
        used, live = sum(s["in_use_bytes"] for s in ts), sum(s["live_bytes"] for s in ts)
        row(
            "H_torch_cached",
            "per site in use / live from the allocator, summed == allocated / reserved",
            f"{mib(t['allocated'])} / {mib(t['reserved'])}",
            f"{mib(used)} / {mib(live)} in {len(ts)} sites",
            used == t["allocated"] == t["seg_allocated"]
            and live == t["reserved"] == t["seg_total"]
            and all(s["in_use_bytes"] + s["cached_bytes"] == s["live_bytes"] for s in ts),
            f"{t['segments']} segments; cached {mib(sum(s['cached_bytes'] for s in ts))}",
        )
    elif os.path.isdir(os.path.join(RUN, "H_torch_cached")):
        missing_holders("H_torch_cached")
    t, r, _ = load("H_train")
    h = load_holders("H_train")
    if r and h:
        lines = holder_lines(h)
        bad = [v for k, v in lines.items() if k[0] != "path"]
        held = sum(
            v[1]
            for k, v in lines.items()
            if k[0] == "path" and k[1] in ("gpu/cases.py global 'model'", "gpu/cases.py global 'opt'")
        )
        row(
            "H_train",
            "negative control: no suspect; params and state held by model and optimizer only",
            f"0 suspects, {mib(t['param_state_bytes'])}",
            f"{len(r['suspects'])} suspects, {mib(held)}; {len(bad)} other lines",
            not r["suspects"] and held == t["param_state_bytes"] and not bad,
            "; ".join(quote(v[2]) for v in list(lines.values())[:3]),
        )
    elif os.path.isdir(os.path.join(RUN, "H_train")):
        missing_holders("H_train")


def missing_holders(case):
    row(case, "holders file written", "yes", "no", False, "see stderr in logs")


def api_checks():
    """P_api (issue 15): gpushim.snapshot("torch-api") under PyTorch wrote a labelled file that
    holds torch's reserved bytes, and its heap walk's file appeared after the call."""
    t, r, _ = load("P_api")
    if not t:
        return
    path = t.get("path") or ""
    snap = read_json(path) if t.get("exists") else None
    want_name = "-snapshot-1-torch-api.json"
    live = snap["kinds"]["device"]["live_bytes"] if snap else None
    row(
        "P_api",
        "gpushim.snapshot(label) under torch: file, label, live == reserved",
        f"*{want_name}, label torch-api, {mib(t.get('reserved'))}",
        f"{os.path.basename(path) or 'None'}, label {snap.get('label') if snap else None}, {mib(live)}",
        bool(t.get("tracing"))
        and path.endswith(want_name)
        and snap is not None
        and snap.get("label") == "torch-api"
        and live == t.get("reserved"),
        f"snapshot took {t.get('snapshot_s', 0):.2f} s; report_path() {t.get('report_path')}; "
        f"final report of pid {r['pid'] if r else None}",
    )
    row(
        "P_api",
        "heap walk of the API snapshot written after the call returned",
        "*-snapshot-1-torch-api.holders.json",
        os.path.basename(t.get("holders") or "") or "none",
        (t.get("holders") or "").endswith("-snapshot-1-torch-api.holders.json"),
    )


def checks():
    holder_checks()
    api_checks()
    torch_rows("torch_default")
    torch_rows("torch_expandable")
    t, r, _ = load("torch_expandable")
    if r:
        row(
            "torch_expandable",
            "driver VMM only (no cudaMalloc)",
            "cuMemCreate",
            ",".join(apis(r)),
            "cudaMalloc" not in apis(r) and "cuMemCreate" in apis(r),
        )
    torch_rows("torch_async", "allocated", at_snapshot=True)
    t, r, _ = load("torch_async")
    if r:
        row(
            "torch_async",
            "stream-ordered API seen",
            "cudaMallocAsync/cuMemAllocAsync",
            ",".join(apis(r)),
            any("Async" in a for a in apis(r)),
        )
    t, r, s = load("torch_nocache")
    if r and s:
        row(
            "torch_nocache",
            "live allocations == live tensors (snapshot)",
            t["live_tensors"],
            kind(s, "device", "live_count"),
            kind(s, "device", "live_count") == t["live_tensors"],
        )
        row(
            "torch_nocache",
            "device live == live tensor bytes (snapshot)",
            mib(t["live_tensor_bytes"]),
            mib(kind(s, "device")),
            kind(s, "device") == t["live_tensor_bytes"],
            f"torch.cuda.memory_allocated() reads {mib(t['allocated'])} with caching off",
        )
    else:
        missing("torch_nocache")
    t, r, _ = load("torch_pinned")
    if r:
        row(
            "torch_pinned",
            "pinned_host live count == pinned tensors",
            t["pinned_tensors"],
            kind(r, "pinned_host", "live_count"),
            kind(r, "pinned_host", "live_count") == t["pinned_tensors"],
        )
        row(
            "torch_pinned",
            "pinned_host live >= tensor bytes",
            mib(t["pinned_tensor_bytes"]),
            mib(kind(r, "pinned_host")),
            kind(r, "pinned_host") >= t["pinned_tensor_bytes"],
            "host caching allocator rounds sizes up",
        )
    else:
        missing("torch_pinned")
    t, r, s = load("cupy")
    if r and s:
        row(
            "cupy",
            "snapshot device live == pool.total_bytes()",
            mib(t["pool_total_before"]),
            mib(kind(s, "device")),
            kind(s, "device") == t["pool_total_before"],
            f"apis {apis(r)}",
        )
        row(
            "cupy",
            "after free_all_blocks device live == total_bytes()",
            mib(t["pool_total_after"]),
            mib(kind(r, "device")),
            kind(r, "device") == t["pool_total_after"],
        )
    else:
        missing("cupy")
    for case in ("jax_platform", "jax_default"):
        t, r, snap = load(case)
        if not r or not snap:
            missing(case)
            continue
        r = snap  # JAX frees its buffers at exit: compare at the snapshot taken with the truth
        live = kind(r, "device")
        if case == "jax_platform":
            row(
                case,
                "device live >= live_arrays bytes",
                mib(t["live_array_bytes"]),
                mib(live),
                live >= t["live_array_bytes"],
                f"bytes_in_use {mib(t.get('bytes_in_use'))}; apis {apis(r)}",
            )
        else:
            big = max((s["live_bytes"] for s in r["sites"]), default=0)
            lim = t.get("bytes_limit") or t.get("bytes_reserved") or 0
            row(
                case,
                "one preallocation >= 0.9 x bytes_limit",
                mib(lim),
                mib(big),
                lim > 0 and big >= 0.9 * lim,
                f"{kind(r, 'device', 'live_count')} live; apis {apis(r)}",
            )
    t, r, _ = load("numba")
    if r:
        # Numba releases its primary context at exit (cuDevicePrimaryCtxRelease): what that
        # teardown freed was live until then.
        torn = sum(c["bytes"] for c in r.get("context_teardowns", []))
        row(
            "numba",
            "device live + freed by the context's teardown >= device arrays",
            mib(t["device_array_bytes"]),
            mib(kind(r, "device") + torn),
            kind(r, "device") + torn >= t["device_array_bytes"],
            f"apis {apis(r)}; {mib(torn)} freed by {[c['api'] for c in r.get('context_teardowns', [])]}",
        )
        row(
            "numba",
            "pinned_host allocations seen",
            t["pinned_created"],
            kind(r, "pinned_host", "live_count")
            + sum(1 for s in r["sites"] if s["kind"] == "pinned_host" and s["free_count"]),
            kind(r, "pinned_host", "peak_live_bytes") > 0,
            f"pinned live {mib(kind(r, 'pinned_host'))}",
        )
    else:
        missing("numba")
    for case in ("cxx_static", "cxx_shared"):
        t, r, _ = load(case)
        if not r:
            missing(case)
            continue
        got = (
            kind(r, "device"),
            kind(r, "device", "live_count"),
            kind(r, "managed"),
            kind(r, "pinned_host"),
            r["totals"]["alloc_count"],
            r["totals"]["free_count"],
        )
        want = (80 * MIB, 48, 16 * MIB, 8 * MIB, 152, 88)
        row(
            case,
            "device/count/managed/pinned/allocs/frees",
            "80M/48/16M/8M/152/88",
            "/".join(str(g // MIB) + "M" if i in (0, 2, 3) else str(g) for i, g in enumerate(got)),
            got == want,
            f"apis {apis(r)}",
        )
    t, r, _ = load("cudarc")
    if r:
        row(
            "cudarc",
            "device live (16 + 100 x 4 MiB)",
            mib(416 * MIB),
            mib(kind(r, "device")),
            kind(r, "device") == 416 * MIB,
        )
        s, where = top_suspect(r)
        row("cudarc", "top suspect", "cache_batch", where, "cache_batch" in where)
    else:
        missing("cudarc")
    # Scenarios
    for case, want in (("S1", None), ("S2", None), ("S3", None), ("S7", "render")):
        t, r, _ = load(case)
        if not r:
            missing(case)
            continue
        s, where = top_suspect(r)
        ok = s is not None and (want is None or want in where)
        note = s["reason"] if s else ""
        row(case, "top suspect", want or "a growing site", where, ok, note)
        if case == "S3":
            vmm = sum(x["live_bytes"] for x in r["sites"] if "cuMemCreate" in x["apis"])
            other = kind(r, "device") - vmm
            row(
                case,
                "cuMemCreate live == torch reserved; no cudaMalloc",
                mib(t.get("reserved")),
                mib(vmm),
                vmm == t.get("reserved") and "cudaMalloc" not in apis(r),
                f"{mib(other)} more through cuMemAlloc outside PyTorch's pool (cuBLAS workspace)",
            )
    t, r, s = load("S4")
    if r:
        row(
            "S4",
            "no suspect; snapshot live == pool total",
            mib(t.get("pool_total_before")),
            mib(kind(s, "device") if s else None),
            not r["suspects"] and s is not None and kind(s, "device") == t["pool_total_before"],
        )
        row("S4", "after free_all_blocks nothing live", "0 B", mib(kind(r, "device")), kind(r, "device") == 0)
    else:
        missing("S4")
    t, r, s5 = load("S5")
    if r and s5 and "live_array_bytes" in t:
        r = s5
        row(
            "S5",
            "device live >= live_arrays bytes",
            mib(t["live_array_bytes"]),
            mib(kind(r, "device")),
            kind(r, "device") >= t["live_array_bytes"],
            f"{t['live_arrays']} live arrays; suspects {len(r['suspects'])}",
        )
    else:
        missing("S5")
    t, r, _ = load("S6")
    if r:
        pin = [x for x in r["sites"] if x["kind"] == "pinned_host"]
        allocs = sum(x["alloc_count"] for x in pin)
        frees = sum(x["free_count"] for x in pin)
        row(
            "S6",
            "pinned_host allocations / frees",
            f"{t['pinned_created']} / ?",
            f"{allocs} / {frees}",
            allocs >= t["pinned_created"],
            f"live {mib(kind(r, 'pinned_host'))}",
        )
    else:
        missing("S6")
    t, r, _ = load("S8")
    if r:
        row(
            "S8",
            "zero live bytes, no suspect",
            "0 B",
            mib(kind(r, "device")),
            kind(r, "device") == 0 and not r["suspects"],
            f"device used per cuMemGetInfo {mib(t.get('device_used_bytes'))}",
        )
    else:
        missing("S8")
    fault_rows()
    metrics_rows()
    pool_paths_rows()
    ring_threads_rows()
    capture_paths_rows()
    graph_rows()
    torch_snapshot_rows()
    owner_rows()
    issue13_rows()
    devices_per_thread_rows()
    job_rows()
    reach_rows()
    no_import_row()
    container_rows()


def torch_snapshot_rows():
    """torch_snapshot (torch-snapshot-check.py): our torch-snapshot export of a training run against
    torch.cuda.memory._snapshot() of the same moment: the caching allocator's segments in count and
    bytes, and torch.cuda._memory_viz's plots run on our file."""
    d = os.path.join(RUN, "torch_snapshot")
    if not os.path.isdir(d):
        return
    path = os.path.join(d, "truth.json")
    if not os.path.exists(path):
        row("torch_snapshot", "check ran", "truth.json", "none", False, "see stdout/stderr in logs")
        return
    t = read_json(path)
    row(
        "torch_snapshot",
        "segments (through libc10_cuda)",
        t["torch_segments"],
        t["ours_segments"],
        t["torch_segments"] == t["ours_segments"] and t["torch_segments"] > 0,
        f"{t['ours_all_segments']} segments in all",
    )
    row(
        "torch_snapshot",
        "segment bytes",
        mib(t["torch_bytes"]),
        mib(t["ours_bytes"]),
        t["torch_bytes"] == t["ours_bytes"],
    )
    row("torch_snapshot", "same addresses and sizes", True, t["same_addresses"], t["same_addresses"])
    row("torch_snapshot", "segment_plot, trace_plot, segsum, trace run", True, t["viz_ok"], t["viz_ok"])
    row("torch_snapshot", "segment_type as torch's", True, t["segment_types_agree"], t["segment_types_agree"])


USER_OWNER = "user code (direct calls)"


def gpu0(r):
    """The report's `gpu_memory` entry of GPU 0, or an empty one."""
    return next((g for g in (r or {}).get("gpu_memory", []) if g["ordinal"] == 0), {})


def nvml_per_call(t):
    """NVML's growth per call between the first and the last call, as the case measured it."""
    a, b, n = t.get("nvml_after_first_call"), t.get("nvml_after_last_call"), t.get("calls")
    return (b - a) / (n - 1) if a is not None and b is not None and n and n > 1 else None


def site_owner(r, site_id):
    return next((x.get("owner", "") for x in r["sites"] if x["id"] == site_id), "")


def owner_rows():
    """Issue 13: named owners, suspects over the sites of one line, untraced memory."""
    for case in ("torch_default", "cupy", "jax_default"):
        t, r, snap = load(case)
        r = snap or r  # JAX frees its buffers at exit: the snapshot holds the live memory
        if not r:
            missing(case)
            continue
        g = gpu0(r)
        traced = g.get("traced_bytes", 0)
        named = sum(o["live_bytes"] for o in g.get("owners", []) if o["owner"] != USER_OWNER)
        row(
            case,
            ">= 99% of traced live bytes have a named owner",
            "99%",
            f"{100 * named / traced:.2f}%" if traced else "nothing traced",
            traced > 0 and named >= 0.99 * traced,
            ", ".join(f"{o['owner']} {mib(o['live_bytes'])}" for o in g.get("owners", [])[:3]),
        )
    for case in ("stream_linear_20", "stream_linear_100"):
        t, r, _ = load(case)
        if not r:
            missing(case)
            continue
        s, _ = top_suspect(r)
        ok = s is not None and s["live_bytes"] >= 0.5 * t.get("allocated_growth", 0)
        row(
            case,
            "a suspect holding >= half the growth",
            mib(t.get("allocated_growth")),
            mib(s["live_bytes"]) if s else "no suspect",
            ok,
            (s["reason"] if s else "") + f"; owner {site_owner(r, s['site']) if s else ''}",
        )
    t, r, _ = load("jax_recompile")
    if r:
        g = gpu0(r)
        u0, u1 = g.get("untraced_first_bytes"), g.get("untraced_bytes")
        per = (u1 - u0) / t["calls"] if u0 is not None and u1 is not None and t.get("calls") else None
        finding = next((f for f in r.get("findings", []) if "untraced device memory grew by" in f), None)
        row(
            "jax_recompile",
            "no suspect; untraced grew by about 8 MiB per call (a finding)",
            "0 suspects, 6-10 MiB/call",
            f"{len(r['suspects'])} suspects, {mib(per)}/call",
            not r["suspects"] and per is not None and 6 * MIB <= per <= 10 * MIB and finding is not None,
            (finding or g.get("driver_note", ""))
            + f"; NVML in the program: {mib(nvml_per_call(t))}/call after the first call",
        )
    else:
        missing("jax_recompile")
    for case in ("cupy_managed_pool", "numba_deferred_free", "async_pool_keeps"):
        t, r, _ = load(case)
        if not r:
            missing(case)
            continue
        row(
            case,
            "no suspect",
            "0",
            len(r["suspects"]),
            not r["suspects"],
            "; ".join(x["reason"] for x in r["suspects"]),
        )
    t, r, _ = load("S8")
    if r:
        g = gpu0(r)
        want, got = t.get("context_only_nvml_bytes"), g.get("untraced_bytes")
        row(
            "S8",
            "untraced within 10% of a context-only process (NVML)",
            mib(want),
            mib(got),
            want is not None and got is not None and abs(got - want) <= 0.1 * want,
            f"NVML for S8 itself {mib(t.get('nvml_self_bytes'))}; {g.get('driver_note', '')}",
        )


def exit_time_rows():
    """fault_exit_time: 5 children of 1 M cudaMallocAsync + cudaFreeAsync pairs each (pool
    hits); the median time from a child's last act to waitpid's return is at most 50 ms (issue
    14), and each child's report counts its pairs."""
    t, r, _ = load("fault_exit_time")
    if not (t and r):
        missing("fault_exit_time")
        return
    runs = sorted(t["exit_ms"])
    median = runs[len(runs) // 2]
    bare = sorted(t.get("bare_exit_ms") or [0.0])
    bare_median = bare[len(bare) // 2]
    row(
        "fault_exit_time",
        "exit released within 50 ms after 1 M pairs (median of 5, beyond the program's own exit)",
        "<= 50 ms added",
        f"{median - bare_median:.1f} ms added ({median:.1f} against {bare_median:.1f} ms)",
        median - bare_median <= 50,
        "runs "
        + ", ".join(f"{m:.1f}" for m in t["exit_ms"])
        + "; without the shim "
        + ", ".join(f"{m:.1f}" for m in bare),
    )
    pairs, tot = t["pairs"], r["totals"]
    row(
        "fault_exit_time",
        "a child's report counts its pairs",
        f"{pairs} allocations, {pairs} frees, 0 live",
        f"{tot['alloc_count']} allocations, {tot['free_count']} frees, {tot['live_count']} live",
        tot["alloc_count"] == pairs and tot["free_count"] == pairs and tot["live_count"] == 0,
    )


def fault_rows():
    """Cases of the fault review (scripts/gpu/faults.cu)."""
    exit_time_rows()
    t, r, _ = load("fault_exit")
    if r:
        row(
            "fault_exit",
            "frees in cleanup handlers seen: nothing live, no suspect",
            "0 B",
            mib(kind(r, "device")),
            kind(r, "device") == 0 and not r["suspects"] and r["reason"] == "exit",
            f"{mib(t.get('freed_at_exit'))} freed at exit; frees {r['totals']['free_count']}",
        )
    else:
        missing("fault_exit")
    t, r, s = load("fault_snapshot")
    if r and "snapshot_ms" in t:
        ms = t["snapshot_ms"]
        row(
            "fault_snapshot",
            "snapshot while cudaFree waits for a kernel",
            "< 100 ms, 64 MiB live",
            f"{ms:.0f} ms, {mib(kind(s, 'device') if s else None)} live",
            0 <= ms < 100 and s is not None and kind(s, "device") == 64 * MIB,
            f"cudaFree waited {t['free_waited_ms']:.0f} ms",
        )
    else:
        missing("fault_snapshot")
    for case, what in (("fault_reset", "cudaDeviceReset"), ("fault_reset_driver", "cuDevicePrimaryCtxReset")):
        t, r, _ = load(case)
        if r and "kept" in t:
            row(
                case,
                f"{what} frees the context's memory",
                mib(t["kept"]),
                mib(kind(r, "device")),
                kind(r, "device") == t["kept"] and r["totals"]["replaced_count"] == 0,
                "; ".join(n for n in r["notes"] if "tore down" in n),
            )
        else:
            missing(case)
    t, r, _ = load("fault_stream_device")
    if r and t.get("gpus", 0) >= 2:
        row(
            "fault_stream_device",
            "stream-ordered memory on its stream's GPU",
            f"{mib(t['on_gpu1'])} on GPU 1, {mib(t['on_gpu0'])} on GPU 0",
            f"{mib(gpu_live(r, 1))} on GPU 1, {mib(gpu_live(r, 0))} on GPU 0",
            gpu_live(r, 1) == t["on_gpu1"] and gpu_live(r, 0) == t["on_gpu0"],
            f"the runtime put it on GPU {t['ptr_device']}",
        )
    elif t.get("gpus", 2) < 2:
        one_gpu_row("fault_stream_device", t)
    else:
        missing("fault_stream_device")
    t, r, _ = load("fault_reset_static")
    if r and "kept" in t:
        seen = kind(r, "device") == t["kept"]
        row(
            "fault_reset_static",
            "static runtime's cudaDeviceReset (a documented limit when not seen)",
            mib(t["kept"]),
            mib(kind(r, "device")),
            True,
            "seen: " + "; ".join(n for n in r["notes"] if "tore down" in n) if seen else "not seen (limit)",
        )
    else:
        missing("fault_reset_static")
    t, r, _ = load("fault_contexts")
    if r and "kept" in t:
        notes = [n for n in r["notes"] if "tore down" in n]
        row(
            "fault_contexts",
            "own contexts and the primary's last release free their memory",
            mib(t["kept"]),
            mib(kind(r, "device")),
            kind(r, "device") == t["kept"]
            and any("created" in n and "cuCtxDestroy" in n for n in notes)
            and any("cuDevicePrimaryCtxRelease" in n for n in notes)
            and (t.get("pooled_free_after_destroy", 0) != 0 or r["totals"]["unknown_free_count"] == 0),
            f"cuMemGetInfo free {mib(t['free_before'])} -> {mib(t['free_after'])}; "
            f"cuMemFreeAsync of pool memory after its context's destruction: {t.get('pooled_free_after_destroy')}; "
            + "; ".join(notes),
        )
    else:
        missing("fault_contexts")
    t, r, _ = load("fault_pool_device")
    if r and t.get("gpus", 0) >= 2 and t.get("result") == 0:
        row(
            "fault_pool_device",
            "pool memory on the pool's GPU, not the stream's",
            f"{mib(t['on_gpu1'])} on GPU 1, 0 on GPU 0",
            f"{mib(gpu_live(r, 1))} on GPU 1, {mib(gpu_live(r, 0))} on GPU 0",
            gpu_live(r, 1) == t["on_gpu1"] and gpu_live(r, 0) == 0,
            f"the runtime put it on GPU {t['ptr_device']}",
        )
    elif t.get("gpus", 2) < 2:
        one_gpu_row("fault_pool_device", t)
    elif t.get("result", 0) != 0:
        row("fault_pool_device", "CUDA refused the allocation", "0", t["result"], True, "not applicable")
    else:
        missing("fault_pool_device")
    t, r, _ = load("fault_oom_device")
    if r and t.get("gpus", 0) >= 2:
        info = {m["device"]: m for m in r["mem_info"]}
        got = info.get(1, {}).get("free_bytes")
        close = got is not None and abs(got - t["free_gpu1"]) < (1 << 30)
        row(
            "fault_oom_device",
            "OOM report: free/total of the stream's GPU",
            f"GPU 1 free {mib(t['free_gpu1'])}",
            f"GPU 1 free {mib(got)}" if got is not None else "none",
            t["result"] == 2 and close and info[1]["total_bytes"] == t["total_gpu1"],
            f"GPU 0 free was {mib(t['free_gpu0'])}; result {t['result']}",
        )
    elif t.get("gpus", 2) < 2:
        one_gpu_row("fault_oom_device", t)
    else:
        missing("fault_oom_device")
    vmm_rows()
    for case, names in (
        ("fault_arrays", "driver"),
        ("fault_arrays_shared", "runtime"),
    ):
        t, r, _ = load(case)
        if not (r and "requirements" in t):
            missing(case)
            continue
        reqs = t["requirements"]
        told = all(code == 0 for code, _ in reqs)
        want = sum(size for _, size in reqs) if told else t["texel_bytes"]
        array_apis = [a for a in apis(r) if "Array" in a]
        runtime = all(a.startswith("cuda") for a in array_apis)
        row(
            case,
            "3 arrays live, device live == " + ("driver's footprint" if told else "texel bytes"),
            mib(want),
            f"{mib(kind(r, 'device'))} in {kind(r, 'device', 'live_count')}",
            kind(r, "device") == want
            and kind(r, "device", "live_count") == 3
            and len(array_apis) == len(apis(r))
            and runtime == (names == "runtime"),
            f"cuMemGetInfo delta {mib(t['used_delta'])}; requirements {reqs}; apis {array_apis}",
        )


def prometheus_samples(text):
    """`{(name, labels): value}` of a Prometheus text exposition (labels as a frozenset of pairs)."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"^([a-z_:][a-z0-9_:]*)(?:\{(.*)\})? (\S+)$", line)
        if m:
            labels = frozenset(re.findall(r'([a-z_]+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
            out[(m.group(1), labels)] = float(m.group(3))
    return out


def metrics_rows():
    """fault_metrics (faults.cu metrics, issue 14): the collector's /metrics scraped by the program
    itself with 104 MiB live, against the truth and the final report."""
    case = "fault_metrics"
    t, r, _ = load(case)
    path = os.path.join(RUN, case, "metrics.txt")
    if not (r and t and os.path.exists(path)):
        return missing(case)
    with open(path, encoding="utf-8", errors="replace") as f:
        m = prometheus_samples(f.read())

    def one(name):
        vals = [v for (n, _), v in m.items() if n == name]
        return vals[0] if len(vals) == 1 else None

    gpu = [dict(lab) for (n, lab) in m if n == "gpushim_gpu_live_bytes"]
    sites = sorted(((v, dict(lab)) for (n, lab), v in m.items() if n == "gpushim_site_live_bytes"), key=lambda x: -x[0])
    uuid0 = next((p["uuid"] for p in r.get("physical_devices", []) if p["ordinal"] == 0), None)
    live, allocs = one("gpushim_process_live_bytes"), one("gpushim_allocations_total")
    ats = [lab.get("at", "").split(" (")[0] for _, lab in sites[:2]]
    row(
        case,
        "/metrics during the run: live == truth == report; allocations == report; GPU 0's UUID; top sites",
        f"{mib(t['kept'])}, {r['totals']['alloc_count']} allocations, metrics_weights then metrics_leak",
        f"{mib(live)}, {allocs} allocations, {ats}",
        t.get("scraped") is True
        and live == t["kept"] == r["totals"]["live_bytes"]
        and allocs == r["totals"]["alloc_count"]
        and one("gpushim_frees_total") == r["totals"]["free_count"]
        and len(gpu) == 1
        and gpu[0].get("gpu") == uuid0
        and ats == ["metrics_weights", "metrics_leak"]
        and [v for v, _ in sites[:2]] == [64 * MIB, 40 * MIB],
        f"gpu labels {gpu}; suspects {one('gpushim_suspects')}",
    )


def pool_path_sites(r):
    """The sites of faults.cu pool-paths summed per path, {path: live bytes, live count and
    allocations}, by the outer function in their frames: the compiler may give one path more
    than one call instruction (the H200 run of 2026-12-01 had path b at two return addresses in
    pool_paths, kept and freed), and each return address is a site of its own."""
    out = {}
    for s in r["sites"]:
        names = [f.get("function") or "" for f in s["frames"]]
        for path in ("pool_path_a", "pool_path_b"):
            if any(path in n for n in names):
                t = out.setdefault(path, {"live_bytes": 0, "live_count": 0, "alloc_count": 0})
                for k in t:
                    t[k] += s[k]
    return out


def site_key(s):
    return (tuple(f.get("function") for f in s["frames"]), s["live_bytes"], s["live_count"], s["alloc_count"])


def pool_paths_rows():
    """fault_pool_paths(_nocache) (faults.cu pool-paths, issue 18): exact sites and totals with the
    hot path's per-thread caches on and off, and the same sites both ways."""
    sites = {}
    for case in ("fault_pool_paths", "fault_pool_paths_nocache"):
        t, r, _ = load(case)
        if not r or not t:
            missing(case)
            continue
        p = pool_path_sites(r)
        a, b = p.get("pool_path_a"), p.get("pool_path_b")
        got = lambda s: (s["live_bytes"], s["live_count"], s["alloc_count"]) if s else None  # noqa: E731
        row(
            case,
            "pool hits from two paths: live bytes, live count, allocations per site (a; b); GPU 0 live",
            f"{t['kept_a']}, {t['n_a']}, 10000; {t['kept_b']}, {t['n_b']}, 10000; {t['kept_a'] + t['kept_b']}",
            f"{got(a)}; {got(b)}; {gpu_live(r, 0)}",
            got(a) == (t["kept_a"], t["n_a"], 10000)
            and got(b) == (t["kept_b"], t["n_b"], 10000)
            and gpu_live(r, 0) == t["kept_a"] + t["kept_b"],
        )
        sites[case] = sorted(site_key(s) for s in r["sites"])
    if len(sites) == 2:
        on, off = sites["fault_pool_paths"], sites["fault_pool_paths_nocache"]
        row(
            "fault_pool_paths",
            "the same sites (frames, live bytes, counts) with GPUSHIM_UNWIND_CACHE=0",
            f"{len(off)} sites, equal",
            f"{len(on)} sites, {'equal' if on == off else 'different'}",
            on == off,
        )


def per_thread_at(r, function):
    """{thread name: [allocations, bytes]} over the sites whose frames name `function`."""
    out = {}
    for s in r["sites"]:
        if any(function in (f.get("function") or "") for f in s["frames"]):
            for t in s.get("threads", []):
                e = out.setdefault(t["name"], [0, 0])
                e[0] += t["alloc_count"]
                e[1] += t["alloc_bytes"]
    return out


def ring_threads_rows():
    """fault_ring_threads (faults.cu ring-threads, issue 18: the shim's per-thread rings): exact
    totals and per-thread counts at each site, and snapshots without a late marker."""
    case = "fault_ring_threads"
    t, r, _ = load(case)
    if not r or not t:
        missing(case)
        return
    n, m = t["threads"], t["pairs_per_index"]
    pairs = sum((i + 1) * m for i in range(n))
    kept = sum(i + 1 for i in range(n))
    tot = r["totals"]
    got = (tot["alloc_count"], tot["free_count"], tot["live_count"], tot["live_bytes"], tot["lost_events"])
    want = (pairs + kept, pairs, kept, kept * t["keep_bytes"], 0)
    row(case, "allocations, frees, live count, live bytes, lost events", str(want), str(got), got == want)
    pb, kb = per_thread_at(r, "ring_pair"), per_thread_at(r, "ring_keep")
    bad = [
        name
        for i in range(n)
        for name in [f"ring-{i}"]
        if pb.get(name) != [(i + 1) * m, (i + 1) * m * t["pair_bytes"]]
        or kb.get(name) != [i + 1, (i + 1) * t["keep_bytes"]]
    ]
    row(
        case,
        "each thread ring-i: (i + 1) x 2000 pairs at ring_pair and i + 1 kept blocks at ring_keep",
        f"{n} threads exact",
        f"{n - len(bad)} exact" + (f"; wrong: {', '.join(bad[:4])}" if bad else ""),
        not bad,
    )
    d = os.path.join(RUN, case)
    snaps = [
        read_json(f)
        for f in sorted(glob.glob(os.path.join(d, "gpushim-*-snapshot-*.json")))
        if not f.endswith((".holders.json", ".reach.json"))
    ]
    late = [i + 1 for i, sn in enumerate(snaps) if sn["notes"] or sn["totals"]["lost_events"]]
    row(
        case,
        "snapshots while the threads allocate: no late marker, no lost events",
        f"1 to {t['signals']} snapshots, none noted",
        f"{len(snaps)} snapshots, {len(late)} noted" + (f" (first: {late[0]})" if late else ""),
        1 <= len(snaps) <= t["signals"] and not late,
    )


def vmm_gpu(r, ordinal=0):
    """The report's `vmm` entry of a device, or an empty one."""
    return next((v for v in (r or {}).get("vmm", []) if v["ordinal"] == ordinal), {})


def vmm_rows():
    """fault_vmm (faults.cu vmm): released-while-mapped memory stays live; NCCL's order frees once."""
    t, r, s = load("fault_vmm")
    if not (r and "size" in t):
        missing("fault_vmm")
        return
    size = t["size"]
    v = vmm_gpu(s)
    row(
        "fault_vmm",
        "released while mapped: live in the snapshot as the driver says",
        f"{mib(size)} live, mapped, released",
        f"{mib(kind(s, 'device'))} live, {mib(v.get('mapped_bytes'))} mapped, "
        f"{mib(v.get('released_mapped_bytes'))} released",
        s is not None
        and t["used_after_release"] >= size
        and t["byte"] == 42
        and kind(s, "device") == size
        and v.get("mapped_bytes") == size
        and v.get("released_mapped_bytes") == size,
        f"cuMemGetInfo +{mib(t['used_after_release'])} after the release, "
        f"+{mib(t['used_after_unmap'])} after the unmap; byte read {t['byte']}",
    )
    tot = r["totals"]
    v = vmm_gpu(r)
    row(
        "fault_vmm",
        "NCCL retain/release/unmap/release: 0 live, 2 frees, 0 unknown",
        "0 B, 2, 0",
        f"{mib(kind(r, 'device'))}, {tot['free_count']}, {tot['unknown_free_count']}",
        kind(r, "device") == 0
        and tot["free_count"] == 2
        and tot["unknown_free_count"] == 0
        and tot["failed_free_count"] == 0
        and v.get("handles") == 0
        and v.get("mapped_bytes") == 0
        and t["same_handle"] == 1
        and t["nccl_used_after_unmap"] >= size
        and t["used_end"] < size,
        f"same handle {t['same_handle']}; cuMemGetInfo +{mib(t['nccl_used_after_unmap'])} after the unmap, "
        f"+{mib(t['used_end'])} at the end",
    )


def site_calls(r, site_id, function):
    """Whether a frame of site `site_id` is in `function`."""
    return any(f.get("function") == function for s in r["sites"] if s["id"] == site_id for f in s["frames"])


GRAPH_NODE_APIS = {"cudaGraphAddMemAllocNode", "cuGraphAddMemAllocNode"}


def graph_rows():
    """Graph memory nodes (faults.cu graph): statically and dynamically linked runtime."""
    for case in ("fault_graph", "fault_graph_shared"):
        t, r, _ = load(case)
        if not (r and "leaked" in t):
            missing(case)
            continue
        s = r["suspects"][0] if r["suspects"] else None
        at_node = s is not None and site_calls(r, s["site"], "graph_alloc_node")
        node_apis = next((x["apis"] for x in r["sites"] if s and x["id"] == s["site"]), [])
        used = ", ".join(
            f"{k[5:]} {mib(t[k])}"
            for k in ("used_at_create", "used_at_instantiate", "used_at_launch", "used_after_destroy")
        )
        row(
            case,
            "graph leak live under its allocation node's site, the top suspect",
            f"{mib(t['leaked'])} in {t['leak_count']}, at graph_alloc_node",
            f"{mib(kind(r, 'device'))} in {kind(r, 'device', 'live_count')}, "
            + ("at graph_alloc_node" if at_node else "top suspect elsewhere"),
            kind(r, "device") == t["leaked"]
            and kind(r, "device", "live_count") == t["leak_count"]
            and at_node
            and set(node_apis) <= GRAPH_NODE_APIS
            and bool(node_apis),
            f"apis {node_apis}; cuMemGetInfo used: {used}",
        )
        tot = r["totals"]
        unlaunched = next((n for n in r["notes"] if "that no launch reached" in n), "")
        want_note = f"{t['unlaunched'] / MIB:.1f} MiB in 1 graph allocation node that no launch reached"
        row(
            case,
            "launches allocate and free; captured, unlaunched not live",
            f"{t['allocs']} allocs, {t['frees']} frees, 0 unknown; {mib(t['unlaunched'])} unlaunched",
            f"{tot['alloc_count']} allocs, {tot['free_count']} frees, {tot['unknown_free_count']} unknown; "
            + (unlaunched.split(" that ")[0] if unlaunched else "no unlaunched note"),
            tot["alloc_count"] == t["allocs"]
            and tot["free_count"] == t["frees"]
            and tot["unknown_free_count"] == 0
            and unlaunched.startswith(want_note),
            f"used at capture {mib(t['used_at_capture'])}; trim {mib(t['used_before_trim'])} -> "
            f"{mib(t['used_after_trim'])}",
        )


def capture_paths_rows():
    """fault_capture_paths(_shared) (faults.cu capture-paths, issue 18): allocations captured on a
    stream that joined a capture by an event, into the program's graph, and on the per-thread
    stream are graph nodes, never live, while pool hits outside captures are counted exactly."""
    for case in ("fault_capture_paths", "fault_capture_paths_shared"):
        t, r, _ = load(case)
        if not (r and "live" in t):
            missing(case)
            continue
        tot = r["totals"]
        unlaunched = next((n for n in r["notes"] if "that no launch reached" in n), "")
        want = f"{t['unlaunched'] / MIB:.1f} MiB in {t['nodes']} graph allocation nodes that no launch reached"
        row(
            case,
            "captured (joined stream, to-graph, per-thread stream): not live; pool hits counted",
            f"{mib(t['live'])} live; {t['allocs']} allocs, {t['frees']} frees; {want.split(' that ')[0]}",
            f"{mib(kind(r, 'device'))} live; {tot['alloc_count']} allocs, {tot['free_count']} frees; "
            + (unlaunched.split(" that ")[0] if unlaunched else "no unlaunched note"),
            kind(r, "device") == t["live"]
            and tot["alloc_count"] == t["allocs"]
            and tot["free_count"] == t["frees"]
            and tot["unknown_free_count"] == 0
            and unlaunched.startswith(want),
        )


def headlines(r):
    return [x.get("headline", "") for x in r["suspects"]]


def one_suspect_via(r, t, function, line_key, entry):
    """For a vendor-library case (scripts/gpu/vendor_threads.cu): the headline wanted, the
    report's headlines, its first suspect, and whether it has exactly one suspect, headed
    `function (…file:LINE) via entry` with LINE the truth's `line_key`."""
    place = f"{t['file']}:{t[line_key]}) via {entry}"
    heads = headlines(r)
    first = r["suspects"][0] if r["suspects"] else {}
    ok = len(heads) == 1 and heads[0].startswith(f"{function} (") and heads[0].endswith(place)
    return f"{function} ({place}", heads, first, ok


def issue13_rows():
    """Issue 13's cases: one suspect per cause, headed by the user's line (and the library entry
    point it called), threads counted; the autograd engine's thread named."""
    t, r, _ = load("fault_cublas_threads")
    if r and "handle_line" in t:
        want, heads, s, ok = one_suspect_via(r, t, "worker_gemm", "handle_line", "cublasCreate_v2")
        row(
            "fault_cublas_threads",
            "one suspect at the user's line via cublasCreate_v2, from every thread",
            f"1: {want}, {t['threads']} threads",
            f"{len(heads)}: {'; '.join(heads)}, {s.get('threads')} threads",
            ok and s.get("threads") == t["threads"],
            f"{len(s.get('sites', []))} sites; {mib(s.get('live_bytes'))} live; "
            f"cudaMemGetInfo grew {mib(t['used_after'] - t['used_before'])}",
        )
    else:
        missing("fault_cublas_threads")
    t, r, _ = load("fault_nccl_cycles")
    if r and "comm_line" in t:
        want, heads, s, ok = one_suspect_via(r, t, "make_comm", "comm_line", "ncclCommInitAll")
        row(
            "fault_nccl_cycles",
            "one suspect at the user's line via ncclCommInitAll, its sites under it",
            f"1: {want}",
            f"{len(heads)}: {'; '.join(heads)}",
            ok,
            f"{len(s.get('sites', []))} sites; {mib(s.get('live_bytes'))} live; threads {s.get('threads')}; "
            f"cudaMemGetInfo grew {mib(t['used_after'] - t['used_before'])} over {t['cycles']} communicators",
        )
    else:
        missing("fault_nccl_cycles")
    for case in ("fault_logits", "fault_logits_compiled"):
        t, r, _ = load(case)
        if r and "model_line" in t:
            lines = {t["model_line"]} | ({t["call_line"]} if t.get("compiled") else set())
            heads = headlines(r)
            ok = len(heads) == 1 and any(f"cases.py:{n})" in heads[0] for n in lines)
            row(
                case,
                "one suspect, headed by the model's line"
                + (" (or the compiled model's call)" if t.get("compiled") else ""),
                "1: cases.py:" + " or ".join(str(n) for n in sorted(lines)),
                f"{len(heads)}: {'; '.join(heads)}",
                ok,
                f"{mib(r['suspects'][0]['live_bytes']) if heads else 'n/a'} in the suspect; "
                f"logits kept {mib(t['logits_bytes'])}",
            )
        else:
            missing(case)
    t, r, _ = load("fault_autograd_cycle")
    if r and "leaf_line" in t:
        heads = headlines(r)
        autograd = [h for h in heads if "(autograd thread)" in h]
        # The leak's memory is allocated on the autograd engine's thread (the gradient) and at
        # the leaf's line: one suspect at a user's line (the backward call's, where the engine
        # thread's allocations are, or the leaf's), the engine thread named when it is there.
        one = heads[0] if len(heads) == 1 else ""
        at_backward = f"cases.py:{t.get('backward_line')})" in one and one.endswith("(autograd thread)")
        at_leaf = f"cases.py:{t['leaf_line']})" in one
        row(
            "fault_autograd_cycle",
            "one suspect at the user's line (backward or leaf), the autograd thread named",
            f"1: cases.py:{t.get('backward_line')} (autograd thread) or cases.py:{t['leaf_line']}",
            f"{len(heads)}: {'; '.join(heads)}",
            at_backward or at_leaf,
            "autograd thread named: " + ("; ".join(autograd) if autograd else "no autograd-thread suspect"),
        )
    else:
        missing("fault_autograd_cycle")


def job_case(case):
    """(truth per rank, final report per rank, job view) of a two-rank case (scripts/gpu/job_cases.py),
    or None after writing its row when it did not run."""
    d = os.path.join(RUN, case)
    if not os.path.isdir(d):
        return None
    if os.path.exists(os.path.join(d, "truth.json")):
        one_gpu_row(case, read_json(os.path.join(d, "truth.json")))
        return None
    truths, reports = {}, {}
    for f in glob.glob(os.path.join(d, "truth-rank*.json")):
        t = read_json(f)
        truths[t["rank"]] = t
    for f in glob.glob(os.path.join(d, "gpushim-rank*.json")):
        if re.fullmatch(r"gpushim-rank\d+-\d+(\.\d+)?\.json", os.path.basename(f)):
            r = read_json(f)
            reports[r["identity"]["rank"]] = r
    job = read_json(os.path.join(d, "job.json")) if os.path.exists(os.path.join(d, "job.json")) else None
    if sorted(truths) != [0, 1] or sorted(reports) != [0, 1] or job is None:
        row(case, "two rank reports, truths and job.json", "ranks [0, 1]", f"{sorted(reports)} {sorted(truths)}", False)
        return None
    return truths, reports, job


def site_bytes(r, module_part):
    """Live bytes of the sites with a frame in a module whose path contains `module_part`."""
    return sum(s["live_bytes"] for s in r["sites"] if any(module_part in f["module"] for f in s["frames"]))


def devices_per_thread_rows():
    """Each thread's current device, and the GPU behind each ordinal (issue 14)."""
    t, r, _ = load("fault_devices_per_thread")
    if r and t.get("gpus", 0) >= 2:
        row(
            "fault_devices_per_thread",
            "cudaSetDevice per thread, cuCtxPushCurrent: bytes per GPU",
            f"{mib(t['on_gpu0'])} on GPU 0, {mib(t['on_gpu1'])} on GPU 1",
            f"{mib(gpu_live(r, 0))} on GPU 0, {mib(gpu_live(r, 1))} on GPU 1",
            gpu_live(r, 0) == t["on_gpu0"] and gpu_live(r, 1) == t["on_gpu1"],
            f"current device after the pop: {t['current_after_pop']}",
        )
        phys = {p["ordinal"]: p for p in r.get("physical_devices", [])}
        want = [(t[f"pci{d}"].lower(), t[f"uuid{d}"]) for d in (0, 1)]
        got = [
            (phys.get(d, {}).get("pci_bus_id", "").lower(), phys.get(d, {}).get("uuid", "").replace("-", "")[3:])
            for d in (0, 1)
        ]
        row(
            "fault_devices_per_thread",
            "physical_devices: PCI bus id and UUID per ordinal",
            "; ".join(f"{b} {u[:8]}" for b, u in want),
            "; ".join(f"{b} {u[:8]}" for b, u in got),
            got == want,
        )
    elif t.get("gpus", 2) < 2:
        one_gpu_row("fault_devices_per_thread", t)
    else:
        missing("fault_devices_per_thread")


def job_rows():
    """Whole jobs (issue 14): torchrun with two ranks under `gpushim run`, and the job view."""
    got = job_case("job_ddp")
    if got:
        truths, reports, job = got
        for rank in (0, 1):
            t, r = truths[rank], reports[rank]
            torch_bytes = site_bytes(r, "libc10_cuda")
            row(
                "job_ddp",
                f"rank {rank}: live bytes of the caching allocator's sites == memory_reserved()",
                mib(t["reserved"]),
                mib(torch_bytes),
                torch_bytes == t["reserved"],
                f"NCCL sites apart: {mib(site_bytes(r, 'nccl'))}; GPU {rank} live {mib(gpu_live(r, rank))}; "
                f"identity {r['identity'].get('rank')}/{r['identity'].get('world_size')}",
            )
        owns = [p["own_ordinal"] for p in job["processes"]]
        row(
            "job_ddp",
            "each rank on its own GPU, nothing on another",
            "[0, 1], none",
            f"{owns}, {len(job['foreign'])}",
            owns == [0, 1] and not job["foreign"],
        )
    got = job_case("job_gpu0_before_set_device")
    if got:
        truths, reports, job = got
        f = job["foreign"]
        row(
            "job_gpu0_before_set_device",
            "rank 1's tensor made before set_device flagged on GPU 0",
            "rank 1, ordinal 0, >= 8 MiB",
            "; ".join(f"{x['process']}, ordinal {x['ordinal']}, {mib(x['live_bytes'])}" for x in f) or "none",
            len(f) == 1 and f[0]["process"] == "rank 1" and f[0]["ordinal"] == 0 and f[0]["live_bytes"] >= 8 * MIB,
            f"truth: early tensor on {truths[1]['early_device']}, own on {truths[1]['own_device']}",
        )
    got = job_case("job_leak_one_rank")
    if got:
        truths, reports, job = got
        groups = job["suspects"]
        leak = sum(g["live_bytes"] for g in groups)
        row(
            "job_leak_one_rank",
            "suspects of rank 1 only, holding its kept tensors",
            f"rank 1 only, >= {mib(truths[1]['kept_bytes'])}",
            "; ".join(f"{g['scope']} {g['processes']} {mib(g['live_bytes'])} at {g['at']}" for g in groups) or "none",
            bool(groups)
            and all(g["processes"] == ["rank 1"] and g["scope"] == "one" for g in groups)
            and leak >= truths[1]["kept_bytes"],
            f"rank 0 suspects: {len(reports[0]['suspects'])}",
        )


def site_reach(r, function, without_module=None):
    """The summed `reach` counts of the sites whose frames name `function` (and, with
    `without_module`, have no frame in a module whose path contains it)."""
    out = {}
    for s in r["sites"]:
        if without_module and any(without_module in (f.get("module") or "") for f in s["frames"]):
            continue
        if any(f.get("function", "").startswith(function) for f in s["frames"]):
            for k, v in (s.get("reach") or {}).items():
                if isinstance(v, int):
                    out[k] = out.get(k, 0) + v
    return out


def reach_line(x):
    return (
        f"{x['status']}: {x['definitely_lost_count']} lost, {x['indirectly_lost_count']} indirectly lost, "
        f"{x.get('possibly_lost_count', 0)} possibly lost, {x['reachable_count']} reachable, "
        f"{x['unknown_count']} unknown; {x['scanned_bytes'] / MIB:.0f} MiB "
        f"in {x['elapsed_ms']:.0f} ms"
    )


def no_import_row():
    """Issue 29: PyTorch's block stacks on by default add no torch._inductor or torch._dynamo
    import to the program (scripts/gpu/no_import_check.py with a snapshot)."""
    t, r, _ = load("no_import")
    if not r or not t:
        missing("no_import")
        return
    states = {k: v for k, v in t.items() if isinstance(v, dict)}
    any_import = [k for k, v in states.items() if v.get("inductor") or v.get("dynamo")]
    heads = [s["headline"] for s in r["suspects"]]
    want = f"no_import_check.py:{t['model_line']})"
    row(
        "no_import",
        "a kept-outputs loop with a snapshot: no torch._inductor/_dynamo import; the model's line heads",
        f"none imported; 1 suspect at {want[:-1]}",
        f"imported at: {', '.join(any_import) or 'none'}; {len(heads)} suspects: {'; '.join(heads[:2])}",
        set(states) >= {"before_snapshot", "after_snapshot", "at_exit"}
        and not any_import
        and len(heads) == 1
        and want in heads[0],
        ", ".join(f"{k} {v}" for k, v in states.items()),
    )


def container_rows():
    """Issue 30: a PyTorch program as PID 1 of a PID namespace gets its report, exact against
    torch, with the untraced figure marked unknown; a torchrun job stopped with SIGTERM to every
    process leaves the worker's report saying it was stopped."""
    t, r, _ = load("container_pid1")
    if r and t:
        g = gpu0(r)
        live = kind(r, "device")
        row(
            "container_pid1",
            "PID 1 of a PID namespace: a report, device live == torch reserved, untraced unknown",
            f"pid 1, {mib(t.get('reserved'))}, untraced unknown",
            f"pid {r.get('pid')}, {mib(live)}, untraced {mib(g.get('untraced_bytes'))}",
            r.get("pid") == 1
            and live == t.get("reserved")
            and g.get("untraced_bytes") is None
            and str(g.get("driver_note", "")).startswith("unknown"),
            str(g.get("driver_note", ""))[:120],
        )
    else:
        missing("container_pid1")
    t, r, _ = load("torchrun_sigterm")
    if r and t:
        row(
            "torchrun_sigterm",
            "torchrun (1 process) under gpushim run, SIGTERM to every process: the worker's report says stopped",
            "reason stopped, signal SIGTERM",
            f"reason {r.get('reason')}, signal {r.get('signal')}; {r['totals']['alloc_count']} allocations",
            t.get("started") is True and r.get("reason") == "stopped" and r.get("signal") == "SIGTERM",
            f"SIGTERM sent to {t.get('signalled')} processes",
        )
    else:
        missing("torchrun_sigterm")


def reach_rows():
    """Reachability (issue 17): scripts/gpu/reach.cu, S7, cases.py R_torch."""
    for case, keep in (("reach_lost", False), ("reach_kept", True)):
        t, r, _ = load(case)
        if not r or "reachability" not in r:
            missing(case)
            continue
        x, s = r["reachability"], site_reach(r, "vector_add_once")
        got = (s.get("definitely_lost_count", 0), s.get("reachable_count", 0))
        want = (0, 9) if keep else (9, 0)
        row(
            case,
            "vectorAdd's 9 x 4 MiB: " + ("kept in a heap struct: reachable" if keep else "dropped: definitely lost"),
            f"{want[0]} lost, {want[1]} reachable",
            f"{got[0]} lost, {got[1]} reachable",
            x["status"] == "complete" and got == want,
            reach_line(x) + ("; from " + x["most_referenced"][0]["from"] if x.get("most_referenced") else ""),
        )
    # Issue 29, item 5: memory the scan once left out, read now (shared anonymous memory), or
    # called possibly lost where it cannot be sure (a block the driver points to, the memory below
    # a blocked thread's given stack); never definitely lost.
    for case, what, reachable in (
        ("reach_shared", "kept only in MAP_SHARED|MAP_ANONYMOUS memory: reachable", True),
        ("reach_registered", "kept only in a block pinned with cudaHostRegister: never definitely lost", False),
        ("reach_stack", "kept only below a blocked thread's given stack: never definitely lost", False),
    ):
        t, r, _ = load(case)
        if not r or "reachability" not in r:
            missing(case)
            continue
        x, s = r["reachability"], site_reach(r, "vector_add_once")
        lost, reach = s.get("definitely_lost_count", 0), s.get("reachable_count", 0)
        possibly = s.get("possibly_lost_count", 0)
        row(
            case,
            "vectorAdd's 9 x 4 MiB " + what,
            "0 lost, 9 reachable" if reachable else "0 lost",
            f"{lost} lost, {possibly} possibly lost, {reach} reachable",
            x["status"] == "complete" and lost == 0 and (reach == 9 or not reachable),
            reach_line(x),
        )
    t, r, _ = load("reach_cublas")
    if r and "reachability" in r:
        # The matrices are cublas_thread's own cudaMalloc calls; the handles' workspaces are
        # allocated inside libcublas (their stacks also pass through cublas_thread).
        x, m = r["reachability"], site_reach(r, "cublas_thread", without_module="libcublas")
        ws = {k: v for k, v in site_reach(r, "cublas_thread").items() if k.endswith("_count")}
        for k, v in m.items():
            if k in ws:
                ws[k] -= v
        row(
            "reach_cublas",
            "8 cuBLAS handles never destroyed: every allocation classified, the matrices (global) reachable",
            "complete, 0 unknown, 24 matrices reachable",
            f"{x['status']}, {x['unknown_count']} unknown, {m.get('reachable_count', 0)} matrices reachable",
            x["status"] == "complete" and x["unknown_count"] == 0 and m.get("reachable_count", 0) == 24,
            reach_line(x) + f"; cuBLAS's own allocations: {ws}",
        )
    else:
        missing("reach_cublas")
    t, r, _ = load("S7")
    if r and "reachability" in r:
        x, s = r["reachability"], site_reach(r, "render")
        lost = s.get("definitely_lost_count", 0)
        frames = s.get("scanned_count", 0)
        row(
            "S7",
            "render()'s scratch buffers: definitely lost (the pointer is a local that goes out of scope)",
            ">= 299 of 300 lost",
            f"{lost} of {frames} lost",
            x["status"] == "complete" and lost >= 299,
            reach_line(x) + f"; load_model: {site_reach(r, 'load_model')}",
        )
    # What leaving the CUDA libraries' own data out of the roots does on the real driver: the
    # same programs with GPUSHIM_REACHABILITY_CUDA_DATA=1 (a measurement; passes when complete).
    for case, function, total in (("reach_lost_cuda_data", "vector_add_once", 9), ("S7_cuda_data", "render", 300)):
        t, r, _ = load(case)
        if r and "reachability" in r:
            x, s = r["reachability"], site_reach(r, function)
            row(
                case,
                f"{function}'s {total} dropped allocations with the CUDA libraries' data as roots (measured)",
                "how many stay lost",
                f"{s.get('definitely_lost_count', 0)} lost, {s.get('reachable_count', 0)} reachable",
                x["status"] == "complete",
                reach_line(x) + ("; from " + x["most_referenced"][0]["from"] if x.get("most_referenced") else ""),
            )
        else:
            missing(case)
    t, r, _ = load("reach_torch")
    if r and "reachability" in r:
        x = r["reachability"]
        fw = [f for f in x.get("framework_held", []) if f["allocator"] == "PyTorch CUDACachingAllocator"]
        held = fw[0] if fw else {"count": 0, "bytes": 0}
        row(
            "reach_torch",
            "1,000 segments: one line 'reachable by the framework's allocator', none listed as lost",
            f"{t.get('segments')} segments, {mib(t.get('reserved'))}",
            f"{held['count']} segments, {mib(held['bytes'])}; {x['definitely_lost_count']} lost",
            x["status"] == "complete"
            and held["count"] >= t.get("segments", 1)
            and held["bytes"] >= t.get("reserved", 1)
            and x["definitely_lost_count"] == 0,
            reach_line(x),
        )
    else:
        missing("reach_torch")


def main(argv=None):
    global RUN
    RUN = (sys.argv if argv is None else argv)[1]
    rows.clear()
    try:
        checks()
    except Exception as e:  # keep the rows made so far
        traceback.print_exc()
        rows.append(("compare.py", "crashed", "", repr(e), "FAIL", ""))
    print("| case | check | expected | measured | result | note |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(str(c) for c in r) + " |")
    passed = sum(1 for r in rows if r[4] == "PASS")
    print(f"\n{passed} passed, {len(rows) - passed} failed")


if __name__ == "__main__":
    main()
