"""The Jupyter check on the GPU (issue 15), run by scripts/gpu/jupyter-check.sh: a kernel
installed with `gpushim kernel install` (argv[1]: its name, found through JUPYTER_PATH) runs a
cell that keeps a 64 MiB PyTorch tensor twice; `%gpushim diff` must show +64.0 MiB left alive by that cell
(In [4], line 1) and the list `kept` among the holders that grew; `%gpushim report` and the API must work.
Prints each cell's output and one PASS/FAIL line per check; exits 1 if any check failed.
"""

import re
import sys

from jupyter_client.manager import start_new_kernel

LEAK = "kept.append(torch.empty(64 << 20, dtype=torch.uint8, device='cuda'))\ntorch.cuda.synchronize()"
CELLS = [
    "%load_ext gpushim",
    "import torch\nkept = []\nwarm = torch.ones(1, device='cuda')",
    LEAK,
    LEAK,
    "%gpushim diff",
    "%gpushim report",
    "import gpushim\nprint('tracing', gpushim.is_tracing())",
]


def run_cells(name, cells=CELLS, timeout=300, cwd=None):
    """Runs `cells` in a new kernel of spec `name` (in `cwd`, if given): each cell's (status,
    output, execution count). Also used by scripts/jupyter-screenshot.py."""
    outs = []
    km, kc = start_new_kernel(kernel_name=name, startup_timeout=timeout, **({"cwd": cwd} if cwd else {}))
    try:
        for code in cells:
            out = []

            def hook(msg, out=out):
                c = msg["content"]
                if msg["msg_type"] == "stream":
                    out.append(c["text"])
                elif msg["msg_type"] == "error":
                    out.append(f"ERROR {c['ename']}: {c['evalue']}\n")

            reply = kc.execute_interactive(code, timeout=timeout, output_hook=hook)
            outs.append((reply["content"]["status"], "".join(out), reply["content"].get("execution_count")))
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=False)
    return outs


def main():
    outs = run_cells(sys.argv[1])
    for i, (status, text, _) in enumerate(outs):
        print(f"=== cell {i} {status}\n{text}", end="" if text.endswith("\n") else "\n")
    diff, report, api = outs[4][1], outs[5][1], outs[6][1]
    checks = [
        ("every cell ran", all(s == "ok" for s, _, _ in outs)),
        ("diff: one site grew by 64.0 MiB", bool(re.search(r"^\s*\+64\.0 MiB ", diff, re.M))),
        ("diff: left alive by the leaking cell, In [4] line 1", "+64.0 MiB at In [4] line 1" in diff),
        ("diff: the list 'kept' is among the holders that grew", "holders that grew" in diff and "'kept'" in diff),
        ("report: 128 MiB or more live", bool(re.search(r"^live: (1[2-9]\d|[2-9]\d\d)\.\d MiB", report, re.M))),
        ("API: tracing True", api.strip() == "tracing True"),
    ]
    for what, ok in checks:
        print(f"{'PASS' if ok else 'FAIL'} {what}")
    sys.exit(0 if all(ok for _, ok in checks) else 1)


if __name__ == "__main__":
    main()
