"""Tests of scripts/gpu/compare.py on small reports shaped like the collector's JSON
(docs/report-schema.md), without a GPU."""

import json
import os
import subprocess
import sys
from pathlib import Path

import compare
import pytest

MIB = 1 << 20
COMPARE = Path(compare.__file__)


def frame(function, file=None, line=None, internal=False, python=False):
    f = {"function": function, "file": file, "line": line, "module": "", "address": "0x1", "internal": internal}
    if python:
        f["python"] = True
    return f


def site(site_id, frames, kind="device", apis=("cudaMalloc",), live_bytes=0, alloc_count=1, free_count=0):
    return {
        "id": site_id,
        "kind": kind,
        "apis": list(apis),
        "live_bytes": live_bytes,
        "live_count": alloc_count - free_count,
        "alloc_count": alloc_count,
        "free_count": free_count,
        "frames": frames,
    }


def report(device=0, device_count=0, pinned=0, pinned_count=0, sites=(), suspects=(), alloc_count=1):
    def k(live, count):
        return {"live_bytes": live, "live_count": count, "peak_live_bytes": live}

    return {
        "schema": "gpushim.report.v1",
        "reason": "exit",
        "totals": {"live_bytes": device + pinned, "alloc_count": alloc_count, "free_count": 0},
        "kinds": {"device": k(device, device_count), "managed": k(0, 0), "pinned_host": k(pinned, pinned_count)},
        "sites": list(sites),
        "suspects": list(suspects),
        "failures": [],
        "notes": [],
    }


def suspect(site_id, reason="+1.0 MiB per 10 ms over 1 s, 100 live (100.0 MiB), none freed"):
    return {"site": site_id, "score": 1.0, "reason": reason}


@pytest.fixture(autouse=True)
def fresh_rows():
    compare.rows.clear()
    yield
    compare.rows.clear()


def test_mib():
    assert compare.mib(None) == "n/a"
    assert compare.mib(0) == "0.00 MiB"
    assert compare.mib(3 * MIB // 2) == "1.50 MiB"
    assert compare.mib(416 * MIB) == "416.00 MiB"


def test_kind_reads_a_field_of_a_kind():
    r = report(device=80 * MIB, device_count=48, pinned=8 * MIB, pinned_count=2)
    assert compare.kind(r, "device") == 80 * MIB
    assert compare.kind(r, "device", "live_count") == 48
    assert compare.kind(r, "pinned_host", "live_count") == 2
    assert compare.kind(r, "managed", "peak_live_bytes") == 0
    assert compare.kind(None, "device") is None


def test_first_frame_skips_internal_and_unsymbolized_frames():
    frames = [
        frame("cudaMalloc", internal=True),
        frame("cuMemAlloc_v2", "/usr/lib/libcuda.so.1", None, internal=True),
        frame("??"),
        {"function": None, "file": None, "line": None, "internal": False},
        frame("render(int)", "/src/examples/leak.c", 54),
        frame("main", "/src/examples/leak.c", 80),
    ]
    r = report(sites=[site(7, frames)])
    assert compare.first_frame(r, 7) == "render(int) leak.c:54"


def test_first_frame_python_frames():
    frames = [
        frame("empty", "/venv/lib/python3.12/site-packages/torch/_refs.py", 10, internal=True, python=True),
        frame("grow", "/w/scripts/gpu/pyframes_check.py", 35, python=True),
        frame("train_step", "/w/scripts/gpu/pyframes_check.py", 40, python=True),
    ]
    assert compare.first_frame(report(sites=[site(1, frames)]), 1) == "grow pyframes_check.py:35"


def test_first_frame_without_file_or_line_is_the_function_alone():
    r = report(sites=[site(1, [frame("cache_batch")])])
    assert compare.first_frame(r, 1) == "cache_batch"


def test_first_frame_of_a_site_without_user_frame_or_unknown_site():
    r = report(sites=[site(1, [frame("cudaMalloc", internal=True), frame("??")]), site(2, [])])
    assert compare.first_frame(r, 1) == "(no symbolized frame)"
    assert compare.first_frame(r, 2) == "(no symbolized frame)"
    assert compare.first_frame(r, 99) == "?"


def test_top_suspect_is_the_first_listed_not_the_largest_site():
    big = site(1, [frame("warmup", "/src/a.c", 1)], live_bytes=900 * MIB)
    leak = site(2, [frame("cudaMalloc", internal=True), frame("leaky_step", "/src/b.c", 22)], live_bytes=10 * MIB)
    r = report(sites=[big, leak], suspects=[suspect(2), suspect(1)])
    s, where = compare.top_suspect(r)
    assert s["site"] == 2
    assert where == "leaky_step b.c:22"


def test_top_suspect_without_suspects():
    assert compare.top_suspect(report(sites=[site(1, [frame("f", "a.c", 1)])])) == (None, "no suspect")
    assert compare.top_suspect(None) == (None, "no suspect")


def test_apis_is_the_sorted_union_over_sites():
    r = report(sites=[site(1, [], apis=["cuMemCreate", "cudaMalloc"]), site(2, [], apis=["cuMemAlloc", "cudaMalloc"])])
    assert compare.apis(r) == ["cuMemAlloc", "cuMemCreate", "cudaMalloc"]
    assert compare.apis(None) == []


def write_case(run, case, files):
    d = run / case
    d.mkdir(parents=True, exist_ok=True)
    for name, doc in files.items():
        (d / name).write_text(json.dumps(doc))


def test_load_takes_the_report_with_most_allocations_and_the_first_snapshot(tmp_path, monkeypatch):
    monkeypatch.setattr(compare, "RUN", str(tmp_path))
    write_case(
        tmp_path,
        "S4",
        {
            "truth.json": {"pool_total_before": 512 * MIB},
            "gpushim-10.json": report(device=1, alloc_count=2),  # a helper process
            "gpushim-11.json": report(device=2, alloc_count=50),  # the one that did the work
            "gpushim-11-snapshot-2.json": report(device=4, alloc_count=99),
            "gpushim-11-snapshot-1.json": report(device=3, alloc_count=99),
            "gpushim-11-oom-1.json": report(device=5, alloc_count=999),
        },
    )
    truth, r, snap = compare.load("S4")
    assert truth == {"pool_total_before": 512 * MIB}
    assert compare.kind(r, "device") == 2
    assert compare.kind(snap, "device") == 3


def test_load_of_a_case_without_files(tmp_path, monkeypatch):
    monkeypatch.setattr(compare, "RUN", str(tmp_path))
    assert compare.load("cupy") == ({}, None, None)


def cudarc_report(device):
    leak = site(
        3,
        [frame("cuMemAlloc_v2", internal=True), frame("cudarc_leak::cache_batch", "/src/main.rs", 31)],
        apis=["cuMemAlloc"],
        live_bytes=400 * MIB,
        alloc_count=100,
    )
    return report(device=device, device_count=101, sites=[leak], suspects=[suspect(3)], alloc_count=101)


def table_rows(out):
    return [[c.strip() for c in line.strip("|").split("|")] for line in out.splitlines() if line.startswith("| ")]


@pytest.mark.parametrize(
    ("device", "result", "summary"),
    [(416 * MIB, "PASS", "2 passed, 0 failed"), (415 * MIB, "FAIL", "1 passed, 1 failed")],
)
def test_main_prints_the_table(tmp_path, capsys, device, result, summary):
    write_case(tmp_path, "cudarc", {"gpushim-42.json": cudarc_report(device)})
    compare.main(["compare.py", str(tmp_path)])
    out = capsys.readouterr().out
    rows = table_rows(out)
    assert rows[0] == ["case", "check", "expected", "measured", "result", "note"]
    assert rows[1:] == [
        ["cudarc", "device live (16 + 100 x 4 MiB)", "416.00 MiB", compare.mib(device), result, ""],
        ["cudarc", "top suspect", "cache_batch", "cudarc_leak::cache_batch main.rs:31", "PASS", ""],
    ]
    assert out.rstrip().endswith(summary)


def test_main_reports_a_selected_case_without_report(tmp_path, capsys):
    (tmp_path / "S8").mkdir()  # run, but wrote no report; the other cases were not selected
    compare.main(["compare.py", str(tmp_path)])
    capsys.readouterr()
    compare.main(["compare.py", str(tmp_path)])  # a second run starts from no rows
    out = capsys.readouterr().out
    assert table_rows(out)[1:] == [["S8", "report written", "yes", "no", "FAIL", "see stderr in logs"]]
    assert out.rstrip().endswith("0 passed, 1 failed")


def test_main_keeps_the_rows_made_before_a_crash(tmp_path, capsys):
    write_case(
        tmp_path, "torch_default", {"gpushim-1.json": report(device=20 * MIB), "truth.json": {"reserved": 20 * MIB}}
    )
    # a truth file without the counters its check reads
    write_case(tmp_path, "torch_pinned", {"gpushim-2.json": report(pinned=MIB), "truth.json": {}})
    compare.main(["compare.py", str(tmp_path)])
    captured = capsys.readouterr()
    rows = table_rows(captured.out)[1:]
    assert [r[:2] + r[4:5] for r in rows] == [
        ["torch_default", "device live == torch reserved (at exit)", "PASS"],
        ["compare.py", "crashed", "FAIL"],
    ]
    assert rows[1][3] == "KeyError('pinned_tensors')"
    assert "KeyError" in captured.err
    assert captured.out.rstrip().endswith("1 passed, 1 failed")


def test_import_has_no_side_effects_and_the_command_line_is_unchanged(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(COMPARE.parent)}
    imported = subprocess.run(
        [sys.executable, "-c", "import compare"], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert (imported.returncode, imported.stdout, imported.stderr) == (0, "", "")

    write_case(tmp_path, "cudarc", {"gpushim-42.json": cudarc_report(416 * MIB)})
    ran = subprocess.run([sys.executable, str(COMPARE), str(tmp_path)], capture_output=True, text=True, cwd=tmp_path)
    assert ran.returncode == 0
    assert "| cudarc | top suspect | cache_batch | cudarc_leak::cache_batch main.rs:31 | PASS |  |" in ran.stdout
    assert ran.stdout.rstrip().endswith("2 passed, 0 failed")


def fault_report(device, reason="exit", suspects=(), apis_=("cudaMalloc",), free_count=0):
    r = report(device=device, sites=[site(1, [frame("main")], apis=apis_)], suspects=suspects)
    r["reason"] = reason
    r["totals"]["free_count"] = free_count
    return r


@pytest.mark.parametrize(("device", "result"), [(0, "PASS"), (64 * MIB, "FAIL")])
def test_fault_exit_row(tmp_path, capsys, device, result):
    write_case(
        tmp_path,
        "fault_exit",
        {"truth.json": {"freed_at_exit": 72 * MIB}, "gpushim-7.json": fault_report(device, free_count=5)},
    )
    compare.main(["compare.py", str(tmp_path)])
    rows = table_rows(capsys.readouterr().out)
    assert rows[1] == [
        "fault_exit",
        "frees in cleanup handlers seen: nothing live, no suspect",
        "0 B",
        compare.mib(device),
        result,
        "72.00 MiB freed at exit; frees 5",
    ]


@pytest.mark.parametrize(
    ("ms", "snap_device", "result"), [(4.2, 64 * MIB, "PASS"), (1700.0, 64 * MIB, "FAIL"), (4.2, 0, "FAIL")]
)
def test_fault_snapshot_row(tmp_path, capsys, ms, snap_device, result):
    files = {
        "truth.json": {"snapshot_ms": ms, "free_waited_ms": 2000.0},
        "gpushim-7.json": fault_report(0),
        "gpushim-7-snapshot-1.json": fault_report(snap_device, reason="snapshot"),
    }
    write_case(tmp_path, "fault_snapshot", files)
    compare.main(["compare.py", str(tmp_path)])
    rows = table_rows(capsys.readouterr().out)
    assert rows[1][0] == "fault_snapshot"
    assert rows[1][3] == f"{ms:.0f} ms, {compare.mib(snap_device)} live"
    assert rows[1][4] == result


@pytest.mark.parametrize(
    ("case", "reqs", "device", "count", "apis_", "result"),
    [
        ("fault_arrays", [[0, 70 * MIB], [0, 66 * MIB], [0, 90 * MIB]], 226 * MIB, 3, ["cuArray3DCreate"], "PASS"),
        ("fault_arrays", [[1, 0], [1, 0], [1, 0]], 213 * MIB, 3, ["cuArray3DCreate", "cuMipmappedArrayCreate"], "PASS"),
        ("fault_arrays", [[1, 0], [1, 0], [1, 0]], 226 * MIB, 3, ["cuArray3DCreate"], "FAIL"),
        ("fault_arrays", [[1, 0], [1, 0], [1, 0]], 213 * MIB, 2, ["cuArray3DCreate"], "FAIL"),
        ("fault_arrays", [[1, 0], [1, 0], [1, 0]], 213 * MIB, 3, ["cudaMallocArray"], "FAIL"),
        ("fault_arrays_shared", [[1, 0], [1, 0], [1, 0]], 213 * MIB, 3, ["cudaMallocArray"], "PASS"),
        ("fault_arrays_shared", [[1, 0], [1, 0], [1, 0]], 213 * MIB, 3, ["cudaMallocArray", "cudaMalloc"], "FAIL"),
    ],
)
def test_fault_arrays_rows(tmp_path, capsys, case, reqs, device, count, apis_, result):
    truth = {"used_delta": 214 * MIB, "texel_bytes": 213 * MIB, "requirements": reqs}
    r = report(device=device, device_count=count, sites=[site(1, [frame("main")], apis=apis_)])
    write_case(tmp_path, case, {"truth.json": truth, "gpushim-7.json": r})
    compare.main(["compare.py", str(tmp_path)])
    rows = table_rows(capsys.readouterr().out)
    told = reqs[0][0] == 0
    assert rows[1][:5] == [
        case,
        "3 arrays live, device live == " + ("driver's footprint" if told else "texel bytes"),
        compare.mib(226 * MIB if told else 213 * MIB),
        f"{compare.mib(device)} in {count}",
        result,
    ]


@pytest.mark.parametrize(("device", "result"), [(1 * MIB, "PASS"), (65 * MIB, "FAIL")])
def test_fault_reset_row(tmp_path, capsys, device, result):
    r = fault_report(device)
    r["totals"]["replaced_count"] = 0
    r["notes"] = ["cudaDeviceReset tore down GPU 0's context and freed 1 live allocation (64.0 MiB) with it"]
    write_case(tmp_path, "fault_reset", {"truth.json": {"freed_by_reset": 64 * MIB, "kept": MIB}, "gpushim-7.json": r})
    compare.main(["compare.py", str(tmp_path)])
    rows = table_rows(capsys.readouterr().out)
    assert rows[1] == [
        "fault_reset",
        "cudaDeviceReset frees the context's memory",
        "1.00 MiB",
        compare.mib(device),
        result,
        "cudaDeviceReset tore down GPU 0's context and freed 1 live allocation (64.0 MiB) with it",
    ]


@pytest.mark.parametrize(("gpu1", "gpu0", "result"), [(768 * MIB, 64 * MIB, "PASS"), (0, 832 * MIB, "FAIL")])
def test_fault_stream_device_row(tmp_path, capsys, gpu1, gpu0, result):
    r = fault_report(gpu1 + gpu0)
    r["devices"] = [{"ordinal": 0, "live_bytes": gpu0}, {"ordinal": 1, "live_bytes": gpu1}]
    truth = {"gpus": 2, "on_gpu1": 768 * MIB, "on_gpu0": 64 * MIB, "ptr_device": 1}
    write_case(tmp_path, "fault_stream_device", {"truth.json": truth, "gpushim-7.json": r})
    compare.main(["compare.py", str(tmp_path)])
    rows = table_rows(capsys.readouterr().out)
    assert rows[1][3:5] == [f"{compare.mib(gpu1)} on GPU 1, {compare.mib(gpu0)} on GPU 0", result]


def test_fault_stream_device_on_one_gpu_is_skipped_not_failed(tmp_path, capsys):
    write_case(tmp_path, "fault_stream_device", {"truth.json": {"gpus": 1}})
    compare.main(["compare.py", str(tmp_path)])
    rows = table_rows(capsys.readouterr().out)
    assert rows[1] == ["fault_stream_device", "needs two GPUs", "2", "1", "PASS", "not run on this machine"]


def vmm_truth(used_after_release=64 * MIB, same_handle=1):
    return {
        "size": 64 * MIB,
        "granularity": 2 * MIB,
        "used_after_release": used_after_release,
        "byte": 42,
        "used_after_unmap": 0,
        "same_handle": same_handle,
        "nccl_used_after_unmap": 64 * MIB,
        "used_end": 0,
    }


def vmm_report(device, free_count, unknown, mapped, released, reason="exit"):
    r = fault_report(device, reason=reason, apis_=("cuMemCreate",), free_count=free_count)
    r["totals"]["unknown_free_count"] = unknown
    r["totals"]["failed_free_count"] = 0
    r["vmm"] = [
        {
            "ordinal": 0,
            "handles": 1 if device else 0,
            "created_bytes": device,
            "released_mapped": 1 if released else 0,
            "released_mapped_bytes": released,
            "imported_handles": 0,
            "mappings": 1 if mapped else 0,
            "mapped_bytes": mapped,
            "peak_mapped_bytes": 64 * MIB,
        }
    ]
    return r


@pytest.mark.parametrize(
    ("snap_live", "final_frees", "unknown", "results"),
    [
        (64 * MIB, 2, 0, ["PASS", "PASS"]),
        # The shim before VMM accounting: the release was the free, the last release unknown.
        (0, 2, 1, ["FAIL", "FAIL"]),
    ],
)
def test_fault_vmm_rows(tmp_path, capsys, snap_live, final_frees, unknown, results):
    snap = vmm_report(snap_live, 0, 0, 64 * MIB if snap_live else 0, snap_live, reason="snapshot")
    files = {
        "truth.json": vmm_truth(),
        "gpushim-7.json": vmm_report(0, final_frees, unknown, 0, 0),
        "gpushim-7-snapshot-1.json": snap,
    }
    write_case(tmp_path, "fault_vmm", files)
    compare.main(["compare.py", str(tmp_path)])
    rows = [r for r in table_rows(capsys.readouterr().out) if r[0] == "fault_vmm"]
    assert [r[4] for r in rows] == results
    assert rows[0][3] == f"{compare.mib(snap_live)} live, {compare.mib(snap['vmm'][0]['mapped_bytes'])} mapped, " + (
        f"{compare.mib(snap_live)} released"
    )
    assert rows[1][3] == f"0.00 MiB, {final_frees}, {unknown}"


GRAPH_TRUTH = {
    "leaked": 64 * MIB,
    "leak_count": 64,
    "unlaunched": 32 * MIB,
    "allocs": 69,
    "frees": 5,
    "used_at_create": 0,
    "used_at_instantiate": 0,
    "used_at_launch": 64 * MIB,
    "used_after_destroy": 64 * MIB,
    "used_at_capture": 0,
    "used_before_trim": 88 * MIB,
    "used_after_trim": 64 * MIB,
}


def graph_report(device, count, at_node=True, allocs=69, unknown=0, note=True):
    frames = [frame("graph_alloc_node" if at_node else "main")]
    r = report(
        device=device,
        device_count=count,
        sites=[site(3, frames, apis=("cuGraphAddMemAllocNode",), live_bytes=device)],
        suspects=[suspect(3)],
        alloc_count=allocs,
    )
    r["totals"]["free_count"] = 5
    r["totals"]["unknown_free_count"] = unknown
    if note:
        r["notes"] = [
            "32.0 MiB in 1 graph allocation node that no launch reached: never allocated, not counted as live"
        ]
    return r


@pytest.mark.parametrize(
    ("case", "r", "results"),
    [
        ("fault_graph", graph_report(64 * MIB, 64), ["PASS", "PASS"]),
        ("fault_graph_shared", graph_report(64 * MIB, 64), ["PASS", "PASS"]),
        ("fault_graph", graph_report(0, 0, at_node=False, allocs=1, note=False), ["FAIL", "FAIL"]),
        ("fault_graph", graph_report(64 * MIB, 64, unknown=1), ["PASS", "FAIL"]),
        ("fault_graph", graph_report(96 * MIB, 65), ["FAIL", "PASS"]),
    ],
)
def test_fault_graph_rows(tmp_path, capsys, case, r, results):
    write_case(tmp_path, case, {"truth.json": GRAPH_TRUTH, "gpushim-7.json": r})
    compare.main(["compare.py", str(tmp_path)])
    rows = [x for x in table_rows(capsys.readouterr().out) if x[0] == case]
    assert [x[4] for x in rows] == results
    assert rows[0][2] == "64.00 MiB in 64, at graph_alloc_node"
    assert rows[1][2] == "69 allocs, 5 frees, 0 unknown; 32.00 MiB unlaunched"
    assert "cuMemGetInfo used: at_create 0.00 MiB" in rows[0][5]


# ---- the heap walk's companion files (issue 12) ----


def holder(how, path, objects, bytes_, saved_for=None, graph_nodes=0):
    h = {"how": how, "path": list(path), "objects": objects, "bytes": bytes_, "text": " → ".join(path)}
    if saved_for:
        h["saved_for"], h["graphs"], h["graph_nodes"] = saved_for, 1, graph_nodes
    return h


def holders_file(sites, walk_found=1, unattributed=()):
    def entry(s):
        return {
            "site": s.get("site", 0),
            "live_bytes": s.get("live", 0),
            "in_use_bytes": s.get("in_use", 0),
            "cached_bytes": s.get("live", 0) - s.get("in_use", 0),
            "in_use_from": s.get("from", "objects"),
            "holders": s.get("holders", []),
        }

    return {
        "schema": "gpushim.holders.v1",
        "walk": {"status": "complete", "elapsed_s": 0.5, "objects_found": walk_found, "message": "walked 9 objects"},
        "sites": [entry(s) for s in sites],
        "unattributed": {"holders": list(unattributed)},
    }


S1_PATH = ["function 's1_aux_loss' (cases.py:189) local 'total_aux'", "Tensor() float32 grad_fn=AddBackward0"]


@pytest.mark.parametrize(
    ("nodes", "split", "result"),
    [(16004, (1972, 28), "PASS"), (16003, (1972, 28), "FAIL"), (16004, (1972, 27), "FAIL")],
)
def test_s1_holder_row_sums_the_autograd_line_over_sites(tmp_path, capsys, nodes, split, result):
    lines = [holder("autograd", S1_PATH, n, n * 2 * MIB, "AbsBackward0", nodes) for n in split]
    write_case(
        tmp_path,
        "S1",
        {
            "truth.json": {"aux_graph_nodes": 16004, "aux_saved_tensors": 2000, "aux_saved_bytes": 4000 * MIB},
            "gpushim-5.json": report(device=1),
            "gpushim-5-snapshot-1.holders.json": holders_file([{"holders": [lines[0]]}, {"holders": [lines[1]]}]),
        },
    )
    compare.main(["compare.py", str(tmp_path)])
    rows = table_rows(capsys.readouterr().out)
    assert rows[1][:3] == [
        "S1",
        "holder: saved by autograd, path names 'total_aux', graph size",
        "'total_aux', 16004 nodes, 2000 tensors, 4000.00 MiB",
    ]
    assert rows[1][4] == result


@pytest.mark.parametrize(("used", "result"), [(40 * MIB, "PASS"), (39 * MIB, "FAIL")])
def test_torch_in_use_vs_cached_row(tmp_path, capsys, used, result):
    sites = [
        {"site": 1, "live": 200 * MIB, "in_use": used - 10 * MIB, "from": "torch"},
        {"site": 2, "live": 40 * MIB, "in_use": 10 * MIB, "from": "torch"},
        {"site": 3, "live": 64 * MIB, "in_use": 0},  # outside PyTorch's pool: not summed
    ]
    truth = {"allocated": 40 * MIB, "reserved": 240 * MIB, "seg_allocated": 40 * MIB, "seg_total": 240 * MIB}
    truth["segments"] = 18
    write_case(
        tmp_path,
        "H_torch_cached",
        {
            "truth.json": truth,
            "gpushim-5.json": report(device=1),
            "gpushim-5-snapshot-1.holders.json": holders_file(sites),
        },
    )
    compare.main(["compare.py", str(tmp_path)])
    rows = table_rows(capsys.readouterr().out)
    assert rows[1][2:5] == ["40.00 MiB / 240.00 MiB", f"{compare.mib(used)} / 240.00 MiB in 2 sites", result]


@pytest.mark.parametrize(
    ("extra", "result"), [([], "PASS"), ([holder("native", ["held from native code: Tensor"], 1, MIB)], "FAIL")]
)
def test_negative_control_row_fails_on_any_other_holder(tmp_path, capsys, extra, result):
    held = [
        holder("path", ["gpu/cases.py global 'model'", "Sequential._modules"], 4, 8 * MIB),
        holder("path", ["gpu/cases.py global 'opt'", "Adam.state"], 8, 16 * MIB),
    ]
    write_case(
        tmp_path,
        "H_train",
        {
            "truth.json": {"param_state_bytes": 24 * MIB},
            "gpushim-5.json": report(device=1),
            "gpushim-5-snapshot-1.holders.json": holders_file([{"holders": held + extra}]),
        },
    )
    compare.main(["compare.py", str(tmp_path)])
    rows = table_rows(capsys.readouterr().out)
    assert rows[1][:2] == ["H_train", "negative control: no suspect; params and state held by model and optimizer only"]
    assert rows[1][4] == result


def test_api_checks_pass_on_a_labelled_snapshot_and_fail_without_the_label(tmp_path, monkeypatch):
    monkeypatch.setattr(compare, "RUN", str(tmp_path))
    d = tmp_path / "P_api"
    snap = dict(report(device=48 * MIB, device_count=2), label="torch-api", reason="snapshot", snapshot=1)
    path = d / "gpushim-7-snapshot-1-torch-api.json"
    holders = d / "gpushim-7-snapshot-1-torch-api.holders.json"
    truth = {
        "reserved": 48 * MIB,
        "tracing": True,
        "path": str(path),
        "exists": True,
        "holders": str(holders),
        "snapshot_s": 0.01,
        "report_path": str(d / "gpushim-7.json"),
    }
    write_case(tmp_path, "P_api", {"truth.json": truth, path.name: snap, "gpushim-7.json": dict(report(), pid=7)})
    compare.api_checks()
    assert [r[4] for r in compare.rows] == ["PASS", "PASS"], compare.rows
    compare.rows.clear()
    path.write_text(json.dumps(dict(snap, label=None)))
    compare.api_checks()
    assert [r[4] for r in compare.rows] == ["FAIL", "PASS"], compare.rows


def grouped(headline, threads=100, sites=(1, 2, 3), live=300 * MIB):
    s = suspect(sites[0])
    s.update({"headline": headline, "threads": threads, "sites": list(sites), "live_bytes": live})
    return s


@pytest.mark.parametrize(
    ("heads", "threads", "result"),
    [
        (["worker_gemm (vendor_threads.cu:31) via cublasCreate_v2"], 100, "PASS"),
        (["worker_gemm (vendor_threads.cu:31) via cublasCreate_v2"], 1, "FAIL"),
        (["worker_gemm (vendor_threads.cu:31)"], 100, "FAIL"),
        (["libcublas.so.13+0x5b45ee"], 100, "FAIL"),
        (["worker_gemm (vendor_threads.cu:31) via cublasCreate_v2"] * 3, 100, "FAIL"),
        ([], 100, "FAIL"),
    ],
)
def test_fault_cublas_threads_row(tmp_path, capsys, heads, threads, result):
    truth = {"threads": 100, "file": "vendor_threads.cu", "handle_line": 31, "used_before": 0, "used_after": 64 * MIB}
    r = report(device=300 * MIB, suspects=[grouped(h, threads) for h in heads])
    write_case(tmp_path, "fault_cublas_threads", {"truth.json": truth, "gpushim-9.json": r})
    compare.main(["compare.py", str(tmp_path)])
    rows = table_rows(capsys.readouterr().out)
    assert rows[1][0] == "fault_cublas_threads"
    assert rows[1][4] == result, rows[1]


@pytest.mark.parametrize(
    ("case", "compiled", "heads", "result"),
    [
        ("fault_logits", False, ["GPT.forward (gpu/cases.py:430) via Linear.forward"], "PASS"),
        ("fault_logits", False, ["t13_logits (gpu/cases.py:436) via Module._wrapped_call_impl"], "FAIL"),
        ("fault_logits", False, ["at::meta::structured_mm::meta (libtorch_cpu.so+0x1)"], "FAIL"),
        ("fault_logits_compiled", True, ["t13_logits (gpu/cases.py:436) via OptimizedModule.forward"], "PASS"),
        ("fault_logits_compiled", True, ["Runner.call (torchinductor_root/cx.py:1269)"], "FAIL"),
        ("fault_logits", False, ["GPT.forward (gpu/cases.py:430)", "MmBackward0 (autograd thread)"], "FAIL"),
    ],
)
def test_fault_logits_rows(tmp_path, capsys, case, compiled, heads, result):
    truth = {"model_line": 430, "call_line": 436, "compiled": compiled, "logits_bytes": 30 * 125 * MIB}
    write_case(tmp_path, case, {"truth.json": truth, "gpushim-9.json": report(suspects=[grouped(h) for h in heads])})
    compare.main(["compare.py", str(tmp_path)])
    rows = table_rows(capsys.readouterr().out)
    assert rows[1][0] == case
    assert rows[1][4] == result, rows[1]


@pytest.mark.parametrize(
    ("heads", "result"),
    [
        (["t13_autograd_cycle (gpu/cases.py:455)"], "PASS"),
        (["t13_autograd_cycle (gpu/cases.py:455)", "MulBackward0 (autograd thread)"], "FAIL"),
        (["at::TensorIteratorBase::allocate_or_resize_outputs (libtorch_cpu.so+0x1)"], "FAIL"),
    ],
)
def test_fault_autograd_cycle_row(tmp_path, capsys, heads, result):
    truth = {"leaf_line": 455, "steps": 30}
    r = report(suspects=[grouped(h) for h in heads])
    write_case(tmp_path, "fault_autograd_cycle", {"truth.json": truth, "gpushim-9.json": r})
    compare.main(["compare.py", str(tmp_path)])
    rows = table_rows(capsys.readouterr().out)
    assert rows[1][0] == "fault_autograd_cycle"
    assert rows[1][4] == result, rows[1]
    assert ("MulBackward0 (autograd thread)" in rows[1][5]) == (len(heads) == 2)


def rank_report(rank, devices=(), sites=(), suspects=()):
    r = report(sites=sites, suspects=suspects)
    r["identity"] = {"rank": rank, "local_rank": rank, "world_size": 2}
    r["devices"] = [{"ordinal": o, "live_bytes": b, "live_count": 1, "peak_live_bytes": b} for o, b in devices]
    return r


@pytest.mark.parametrize(
    ("foreign", "result"),
    [
        ([{"process": "rank 1", "ordinal": 0, "live_bytes": 20 * MIB}], "PASS"),
        ([], "FAIL"),
        ([{"process": "rank 0", "ordinal": 1, "live_bytes": 20 * MIB}], "FAIL"),
    ],
)
def test_job_gpu0_before_set_device_row(tmp_path, capsys, foreign, result):
    write_case(
        tmp_path,
        "job_gpu0_before_set_device",
        {
            "truth-rank0.json": {"rank": 0, "early_device": 0, "own_device": 0},
            "truth-rank1.json": {"rank": 1, "early_device": 0, "own_device": 1},
            "gpushim-rank00000-10.json": rank_report(0, [(0, 40 * MIB)]),
            "gpushim-rank00001-11.json": rank_report(1, [(0, 20 * MIB), (1, 20 * MIB)]),
            "job.json": {"processes": [], "foreign": foreign, "suspects": []},
        },
    )
    compare.main(["compare.py", str(tmp_path)])
    rows = table_rows(capsys.readouterr().out)[1:]
    assert [r[0] for r in rows] == ["job_gpu0_before_set_device"]
    assert rows[0][4] == result


def test_job_rows_on_one_gpu_say_not_run_and_ddp_compares_the_caching_allocators_sites(tmp_path, capsys):
    write_case(tmp_path, "job_leak_one_rank", {"truth.json": {"gpus": 1}})
    c10 = {**frame("c10::cuda::CUDACachingAllocator::malloc"), "module": "/x/libc10_cuda.so"}
    nccl = {**frame("ncclMemAlloc"), "module": "/x/libnccl.so.2"}
    files = {"job.json": {"processes": [{"own_ordinal": 0}, {"own_ordinal": 1}], "foreign": [], "suspects": []}}
    for rank in (0, 1):
        files[f"truth-rank{rank}.json"] = {"rank": rank, "reserved": 22 * MIB, "allocated": 10 * MIB}
        sites = [site(1, [c10], live_bytes=22 * MIB), site(2, [nccl], live_bytes=4 * MIB)]
        files[f"gpushim-rank0000{rank}-{20 + rank}.json"] = rank_report(rank, [(rank, 26 * MIB)], sites)
    write_case(tmp_path, "job_ddp", files)
    compare.main(["compare.py", str(tmp_path)])
    rows = table_rows(capsys.readouterr().out)[1:]
    assert [(r[0], r[4]) for r in rows] == [
        ("job_ddp", "PASS"),
        ("job_ddp", "PASS"),
        ("job_ddp", "PASS"),
        ("job_leak_one_rank", "PASS"),
    ]
    assert rows[0][5].startswith("NCCL sites apart: 4.00 MiB")
    assert rows[3][1:4] == ["needs two GPUs", "2", "1"]


def test_job_leak_one_rank_row(tmp_path, capsys):
    def case(groups):
        write_case(
            tmp_path,
            "job_leak_one_rank",
            {
                "truth-rank0.json": {"rank": 0, "kept": 0, "kept_bytes": 0},
                "truth-rank1.json": {"rank": 1, "kept": 40, "kept_bytes": 40 * MIB},
                "gpushim-rank00000-30.json": rank_report(0),
                "gpushim-rank00001-31.json": rank_report(1),
                "job.json": {"processes": [], "foreign": [], "suspects": groups},
            },
        )
        compare.rows.clear()
        compare.main(["compare.py", str(tmp_path)])
        return table_rows(capsys.readouterr().out)[1][4]

    one = {"scope": "one", "processes": ["rank 1"], "live_bytes": 40 * MIB, "at": "leak (x.py:3)"}
    assert case([one]) == "PASS"
    assert case([one, {**one, "processes": ["rank 0"]}]) == "FAIL"
    assert case([{**one, "scope": "every", "processes": ["rank 0", "rank 1"]}]) == "FAIL"
    assert case([]) == "FAIL"


def test_fault_devices_per_thread_rows(tmp_path, capsys):
    truth = {
        "gpus": 2,
        "on_gpu0": 64 * MIB,
        "on_gpu1": 128 * MIB,
        "current_after_pop": 0,
        "pci0": "0000:3B:00.0",
        "uuid0": "a0" * 16,
        "pci1": "0000:5E:00.0",
        "uuid1": "b1" * 16,
    }
    r = rank_report(0, [(0, 64 * MIB), (1, 128 * MIB)])
    r["physical_devices"] = [
        {"ordinal": 0, "pci_bus_id": "0000:3b:00.0", "uuid": "GPU-a0a0a0a0-a0a0-a0a0-a0a0-a0a0a0a0a0a0"},
        {"ordinal": 1, "pci_bus_id": "0000:5e:00.0", "uuid": "GPU-b1b1b1b1-b1b1-b1b1-b1b1-b1b1b1b1b1b1"},
    ]
    write_case(tmp_path, "fault_devices_per_thread", {"truth.json": truth, "gpushim-5.json": r})
    compare.main(["compare.py", str(tmp_path)])
    rows = table_rows(capsys.readouterr().out)[1:]
    assert [(x[0], x[4]) for x in rows] == [("fault_devices_per_thread", "PASS")] * 2


def reach_scan(lost=0, reachable=0, unknown=0, framework=()):
    return {
        "status": "complete",
        "elapsed_ms": 12.0,
        "scanned_bytes": 64 * MIB,
        "definitely_lost_count": lost,
        "indirectly_lost_count": 0,
        "reachable_count": reachable,
        "unknown_count": unknown,
        "framework_held": list(framework),
        "most_referenced": [{"from": "heap"}] if reachable else [],
    }


def write_reach_case(run, case, r, truth):
    d = run / case
    d.mkdir()
    (d / "gpushim-1.json").write_text(json.dumps(r))
    (d / "truth.json").write_text(json.dumps(truth))


def test_reach_rows_check_lost_kept_and_the_torch_allocator_line(tmp_path, monkeypatch):
    monkeypatch.setattr(compare, "RUN", str(tmp_path))
    vec = [frame("cudaMalloc", internal=True), frame("vector_add_once(Buffers*)", "/w/reach.cu", 50)]
    lost = site(1, vec, alloc_count=9)
    lost["reach"] = {"definitely_lost_count": 9, "reachable_count": 0, "scanned_count": 9}
    r = report(sites=[lost])
    r["reachability"] = reach_scan(lost=9)
    write_reach_case(tmp_path, "reach_lost", r, {"allocations": 9})
    kept = site(1, vec, alloc_count=9)
    kept["reach"] = {"definitely_lost_count": 1, "reachable_count": 8, "scanned_count": 9}
    r = report(sites=[kept])
    r["reachability"] = reach_scan(lost=1, reachable=8)
    write_reach_case(tmp_path, "reach_kept", r, {"allocations": 9})
    r = report()
    held = {"allocator": "PyTorch CUDACachingAllocator", "count": 1000, "bytes": 4000 * MIB}
    r["reachability"] = reach_scan(framework=[held])
    write_reach_case(tmp_path, "reach_torch", r, {"segments": 1000, "reserved": 4000 * MIB})
    compare.reach_rows()
    got = {row[0]: row[4] for row in compare.rows}
    assert got == {"reach_lost": "PASS", "reach_kept": "FAIL", "reach_torch": "PASS"}


def ring_report(n, m, wrong=None, lost=0, notes=()):
    """A report of faults.cu ring-threads: n threads, thread i with (i + 1) x m pairs at ring_pair
    and i + 1 blocks of 8 KiB at ring_keep; `wrong` names a thread whose pair count is off by one."""

    def threads(count_of, size):
        return [
            {"tid": 100 + i, "name": f"ring-{i}", "alloc_count": c, "alloc_bytes": c * size}
            for i in range(n)
            for c in [count_of(i) - (1 if f"ring-{i}" == wrong else 0)]
        ]

    pairs = sum((i + 1) * m for i in range(n))
    kept = sum(i + 1 for i in range(n))
    pair_site = site(
        1, [frame("cudaMallocAsync", internal=True), frame("ring_pair")], alloc_count=pairs, free_count=pairs
    )
    pair_site["threads"] = threads(lambda i: (i + 1) * m, 4096)
    keep_site = site(2, [frame("ring_keep")], live_bytes=kept * 8192, alloc_count=kept)
    keep_site["threads"] = threads(lambda i: i + 1, 8192)
    r = report(device=kept * 8192, device_count=kept, sites=[pair_site, keep_site], alloc_count=pairs + kept)
    r["totals"].update({"free_count": pairs, "live_count": kept, "lost_events": lost})
    r["notes"] = list(notes)
    return r


@pytest.mark.parametrize(
    ("wrong", "lost", "snap_notes", "results"),
    [
        (None, 0, (), ["PASS", "PASS", "PASS"]),
        ("ring-3", 0, (), ["PASS", "FAIL", "PASS"]),
        (None, 1, (), ["FAIL", "PASS", "PASS"]),
        (None, 0, ("snapshot requested 3 events late",), ["PASS", "PASS", "FAIL"]),
    ],
)
def test_fault_ring_threads_rows(tmp_path, capsys, wrong, lost, snap_notes, results):
    truth = {"threads": 16, "pairs_per_index": 2000, "pair_bytes": 4096, "keep_bytes": 8192, "signals": 40}
    final = ring_report(16, 2000, wrong=wrong, lost=lost)
    if wrong:
        # The counts per thread are wrong, the totals right (the pair moved to another site).
        final["sites"][0]["threads"][0]["alloc_count"] += 1
        final["sites"][0]["threads"][0]["alloc_bytes"] += 4096
    snap = ring_report(16, 2000, notes=snap_notes)
    snap["reason"] = "snapshot"
    write_case(
        tmp_path,
        "fault_ring_threads",
        {"truth.json": truth, "gpushim-9.json": final, "gpushim-9-snapshot-1.json": snap},
    )
    compare.main(["compare.py", str(tmp_path)])
    rows = [r for r in table_rows(capsys.readouterr().out) if r[0] == "fault_ring_threads"]
    assert [r[4] for r in rows] == results, rows
    assert rows[2][3] == f"1 snapshots, {1 if snap_notes else 0} noted" + (" (first: 1)" if snap_notes else "")
