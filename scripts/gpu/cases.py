"""GPU workloads for scripts/gpu-matrix.sh: each case runs under libgpushim.so and writes its
framework's own counters (the ground truth) as JSON to the path given as argv[2].

Usage: python3 cases.py CASE TRUTH.json
"""

import json
import os
import signal
import sys
import time

MIB = 1 << 20
CASE, TRUTH = sys.argv[1], sys.argv[2]
truth = {}


def snapshot():
    """Ask the shim for a snapshot; its boundary is this instant, whenever the file is written."""
    os.kill(os.getpid(), signal.SIGUSR1)


def snapshot_walked(timeout_s=20.0):
    """A snapshot, then Python bytecode until the heap walk it asked for has run (the walk is a
    pending call: it runs between bytecodes of the main thread, here in this loop, while the
    caller's frame and locals are alive) and its companion file is written."""
    import glob

    pat = os.path.join(os.environ.get("GPUSHIM_OUTPUT", "."), f"gpushim-{os.getpid()}-snapshot-*.holders.json")
    before = len(glob.glob(pat))
    snapshot()
    end = time.monotonic() + timeout_s
    while len(glob.glob(pat)) <= before and time.monotonic() < end:
        time.sleep(0.01)
    truth["walked"] = len(glob.glob(pat)) > before


def graph_nodes(root):
    """The nodes of the autograd graph of `root` (a grad_fn), each once, along next_functions."""
    seen, todo = {id(root): root}, [root]
    while todo:
        n = todo.pop()
        for c, _ in n.next_functions:
            if c is not None and id(c) not in seen:
                seen[id(c)] = c
                todo.append(c)
    return len(seen)


def torch_truth(torch, prefix=""):
    torch.cuda.synchronize()
    truth[prefix + "reserved"] = torch.cuda.memory_reserved()
    truth[prefix + "max_reserved"] = torch.cuda.max_memory_reserved()
    truth[prefix + "allocated"] = torch.cuda.memory_allocated()


def torch_tensors(torch):
    keep = []
    for n in (1 * MIB, 3 * MIB, 25 * MIB, 100 * MIB, 7 * MIB):
        keep.append(torch.empty(n, dtype=torch.uint8, device="cuda"))
    drop = [torch.empty(64 * MIB, dtype=torch.uint8, device="cuda") for _ in range(3)]
    x = torch.ones(4096, 4096, device="cuda")
    y = (x * 2 + 1).sum()
    del drop
    return keep, x, y


def case_torch(variant):
    import torch

    keep = torch_tensors(torch)
    torch_truth(torch)
    truth["variant"] = variant
    # Some backends free every tensor during interpreter teardown (cudaMallocAsync): compare
    # at this instant too, through a snapshot.
    snapshot()
    return keep


def case_torch_nocache():
    import torch

    keep = [torch.empty((i + 1) * MIB, dtype=torch.uint8, device="cuda") for i in range(10)]
    tmp = [torch.empty(MIB, dtype=torch.uint8, device="cuda") for _ in range(20)]
    del tmp
    torch.cuda.synchronize()
    truth["live_tensors"] = len(keep)
    truth["live_tensor_bytes"] = sum(t.numel() for t in keep)
    torch_truth(torch)
    snapshot()
    return keep


def case_torch_pinned():
    import torch

    keep = [torch.empty(n, dtype=torch.uint8).pin_memory() for n in (1 * MIB, 5 * MIB, 16 * MIB)]
    keep.append(torch.empty(8 * MIB, dtype=torch.uint8, pin_memory=True))
    truth["pinned_tensor_bytes"] = sum(t.numel() for t in keep)
    truth["pinned_tensors"] = len(keep)
    return keep


def case_cupy():
    import cupy as cp

    pool = cp.get_default_memory_pool()
    a = cp.empty(512 * MIB, dtype=cp.uint8)
    b = cp.ones(10 * MIB, dtype=cp.float32)
    del a
    cp.cuda.Device().synchronize()
    truth["pool_total_before"] = pool.total_bytes()
    truth["pool_used_before"] = pool.used_bytes()
    snapshot()
    pool.free_all_blocks()
    truth["pool_total_after"] = pool.total_bytes()
    return b


def case_jax(variant):
    import jax
    import jax.numpy as jnp

    xs = [jnp.ones((n,), dtype=jnp.uint8) for n in (1 * MIB, 16 * MIB, 64 * MIB)]
    ys = [x + 1 for x in xs]
    jax.block_until_ready(ys)
    del xs
    live = jax.live_arrays()
    truth["live_arrays"] = len(live)
    truth["live_array_bytes"] = sum(a.nbytes for a in live)
    truth["variant"] = variant
    dev = jax.devices()[0]
    stats = dev.memory_stats() or {}
    truth["bytes_in_use"] = stats.get("bytes_in_use")
    truth["bytes_limit"] = stats.get("bytes_limit")
    truth["bytes_reserved"] = stats.get("bytes_reserved")
    snapshot()
    return ys


def case_numba():
    import numpy as np
    from numba import cuda

    keep = [cuda.device_array(n, dtype=np.uint8) for n in (2 * MIB, 6 * MIB)]
    tmp = cuda.device_array(MIB, dtype=np.uint8)
    del tmp
    pinned = []
    for i in range(5):
        p = cuda.pinned_array(4 * MIB, dtype=np.uint8)
        if i < 2:
            pinned.append(p)
        del p
    import gc

    gc.collect()
    cuda.synchronize()
    truth["device_array_bytes"] = 8 * MIB
    truth["pinned_kept_bytes"] = 8 * MIB
    truth["pinned_created"] = 5
    return keep, pinned


# ---- leak scenarios (the leak patterns seen in the field) ----


def s1_aux_loss(steps=2000):
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    total_aux = 0
    for _ in range(steps):
        x = torch.randn(512, 1024, device="cuda")
        out = model(x)
        loss = out.pow(2).mean()
        aux = out.abs().mean()  # never backpropagated
        total_aux = total_aux + aux  # BUG: keeps aux's graph and saved activations
        opt.zero_grad()
        loss.backward()
        opt.step()
    torch_truth(torch)
    # The heap walk at a snapshot taken here must name 'total_aux' and its graph's size.
    truth["aux_graph_nodes"] = graph_nodes(total_aux.grad_fn)
    truth["aux_saved_tensors"] = steps
    truth["aux_saved_bytes"] = steps * out.numel() * out.element_size()
    del x, out, loss, aux
    snapshot_walked()
    return model, total_aux


def s2_validation_outputs(batches=400):
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 4096)).cuda()
    model.eval()
    preds = []
    for _ in range(batches):
        x = torch.randn(256, 1024, device="cuda")
        preds.append(model(x))  # BUG: no torch.no_grad(), outputs and graphs kept
    torch_truth(torch)
    truth["preds"] = len(preds)
    truth["pred_bytes"] = sum(p.numel() * p.element_size() for p in preds)
    return preds


def s3_expandable(steps=100):
    import torch

    kept = []
    w = torch.randn(2048, 2048, device="cuda")
    for _ in range(steps):
        a = torch.empty(int(91 * MIB), dtype=torch.uint8, device="cuda")
        b = torch.empty(int(45.5 * MIB), dtype=torch.uint8, device="cuda")
        kept.append(torch.empty(2 * MIB, dtype=torch.uint8, device="cuda"))
        for _ in range(20):  # the step's work: without it 100 steps take a millisecond
            w = torch.tanh(w @ w)
        torch.cuda.synchronize()
        del a, b
    torch_truth(torch)
    return kept


def s4_cupy_pool():
    import cupy as cp

    pool = cp.get_default_memory_pool()
    a = cp.empty(512 * MIB, dtype=cp.uint8)
    del a
    truth["pool_total_before"] = pool.total_bytes()
    snapshot()
    time.sleep(0.2)
    pool.free_all_blocks()
    truth["pool_total_after"] = pool.total_bytes()


def s5_jax_closure(calls=20):
    import jax
    import jax.numpy as jnp

    def make():
        big = jnp.ones((64 * MIB,), dtype=jnp.uint8)

        @jax.jit
        def f(x):
            return jax.lax.fori_loop(0, 3, lambda i, acc: acc + big[i], x)

        return f(jnp.zeros((), dtype=jnp.uint8))

    for _ in range(calls):
        make().block_until_ready()
    live = jax.live_arrays()
    truth["live_arrays"] = len(live)
    truth["live_array_bytes"] = sum(a.nbytes for a in live)
    snapshot()


def s6_numba_pinned(iters=30):
    import gc

    import numpy as np
    from numba import cuda

    for _ in range(iters):
        p = cuda.pinned_array(4 * MIB, dtype=np.uint8)
        del p
    gc.collect()
    truth["pinned_created"] = iters


def nvml_used_by(pid):
    """NVML's used device memory of process `pid` on GPU 0 (nvmlDeviceGetComputeRunningProcesses_v3),
    through ctypes; None when unknown."""
    import ctypes

    class Info(ctypes.Structure):
        _fields_ = [("pid", ctypes.c_uint), ("used", ctypes.c_ulonglong), ("gi", ctypes.c_uint), ("ci", ctypes.c_uint)]

    nvml = ctypes.CDLL("libnvidia-ml.so.1")
    if nvml.nvmlInit_v2() != 0:
        return None
    dev = ctypes.c_void_p()
    if nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(dev)) != 0:
        return None
    infos = (Info * 256)()
    n = ctypes.c_uint(256)
    if nvml.nvmlDeviceGetComputeRunningProcesses_v3(dev, ctypes.byref(n), infos) != 0:
        return None
    return next((infos[i].used for i in range(n.value) if infos[i].pid == pid), None)


def context_only_nvml_bytes():
    """NVML's figure for a separate, untraced process that only creates a context (cuInit and
    the primary context of GPU 0) and asks NVML about itself."""
    import inspect
    import subprocess

    code = (
        inspect.getsource(nvml_used_by) + "\n"
        "import ctypes\n"
        "cuda = ctypes.CDLL('libcuda.so.1')\n"
        "ctx = ctypes.c_void_p()\n"
        "assert cuda.cuInit(0) == 0\n"
        "assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0\n"
        "assert cuda.cuCtxSetCurrent(ctx) == 0\n"
        "assert cuda.cuCtxSynchronize() == 0\n"
        "import os\n"
        "print(nvml_used_by(os.getpid()))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    try:
        return int(out.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None


def s8_context_control():
    import torch

    x = torch.empty(64 * 1000 * 1000, dtype=torch.uint8, device="cuda")
    del x
    torch.cuda.empty_cache()
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    truth["device_used_bytes"] = total - free
    truth["reserved"] = torch.cuda.memory_reserved()
    truth["nvml_self_bytes"] = nvml_used_by(os.getpid())
    truth["context_only_nvml_bytes"] = context_only_nvml_bytes()
    time.sleep(1.5)  # at least one NVML sample by the collector (every 1 s) besides the report's


# ---- issue 13: owners, lines of code, untraced memory ----


def run_linear(torch, lin, x, stream):
    with torch.cuda.stream(stream):
        return lin(x)  # cuBLAS keeps a workspace per stream in PyTorch's pool


def stream_linear(iters):
    """A new CUDA stream per iteration and a small nn.Linear on it: about 32 MiB of cuBLAS
    workspace per stream, kept in PyTorch's pool and never freed (issue 13, gap 3)."""
    import torch

    lin = torch.nn.Linear(256, 256).cuda()
    x = torch.randn(64, 256, device="cuda")
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    for _ in range(iters):
        s = torch.cuda.Stream()
        run_linear(torch, lin, x, s)
        s.synchronize()
    torch_truth(torch)
    truth["iters"] = iters
    truth["allocated_growth"] = torch.cuda.memory_allocated() - before


def jax_recompile(calls=30):
    """A function recompiled per static argument, closing over an 8 MiB constant: device memory
    grows by about 8 MiB per call through loaded modules, not through allocation calls (issue
    13, gap 4)."""
    from functools import partial

    import jax
    import jax.numpy as jnp
    import numpy as np

    # An 8 MiB table every compiled version closes over: XLA:GPU keeps an executable's
    # constants as globals of its loaded module, device memory no allocation call makes.
    table = np.linspace(0.0, 1.0, 2 * MIB, dtype=np.float32).reshape(1024, 2048)

    @partial(jax.jit, static_argnums=1)
    def f(x, k):
        return jnp.dot(x, jnp.asarray(table)) * k

    x = jnp.ones((1024,), dtype=jnp.float32)
    for k in range(calls):
        f(x, k).block_until_ready()
        if k == 0:
            truth["nvml_after_first_call"] = nvml_used_by(os.getpid())
    truth["nvml_after_last_call"] = nvml_used_by(os.getpid())
    truth["calls"] = calls
    time.sleep(1.5)  # an NVML sample after the last call besides the report's


def cupy_managed_pool(iters=2000):
    """CuPy's memory pool over managed memory, arrays of 1 to 7 MiB made, summed and dropped in
    a loop: the pool allocates seven blocks in the first seven iterations and then reuses them.
    Quiet. The kernels are compiled before the loop (from the default pool), so the loop is the
    pool's own pattern."""
    import cupy as cp

    cp.ones(16, dtype=cp.float32).sum()  # compile ones() and sum() first
    cp.cuda.set_allocator(cp.cuda.MemoryPool(cp.cuda.malloc_managed).malloc)
    for i in range(iters):
        a = cp.ones((1 + i % 7) * MIB // 4, dtype=cp.float32)
        a.sum()
        del a
    cp.cuda.Device().synchronize()
    truth["iters"] = iters


def numba_deferred_free(iters=300):
    """Numba's deferred deallocation: device arrays dropped each iteration are freed in
    batches (a saw-tooth), never kept: quiet."""
    import numpy as np
    from numba import cuda

    host = np.ones(MIB, dtype=np.uint8)
    for _ in range(iters):
        d = cuda.to_device(host)
        del d
    cuda.synchronize()
    truth["iters"] = iters


def async_pool_keeps(iters=200):
    """PyTorch on cudaMallocAsync: tensors freed each iteration, the stream-ordered pool keeps
    the memory (run with PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync): quiet."""
    import torch

    for i in range(iters):
        a = torch.empty((1 + i % 5) * 8 * MIB, dtype=torch.uint8, device="cuda")
        del a
    torch.cuda.synchronize()
    truth["iters"] = iters


# ---- who holds it (issue 12): the heap walk's companion files ----


def h_hook_cycle():
    """A forward hook closing over its module, with automatic GC disabled: an unreachable
    reference cycle (module → _forward_hooks → hook → closure → module) that only a collection
    frees."""
    import gc

    import torch

    gc.disable()

    def build():
        net = torch.nn.Linear(4096, 4096).cuda()

        def hook(mod, inp, out):
            net.calls = getattr(net, "calls", 0) + 1

        net.register_forward_hook(hook)
        net(torch.ones(1, 4096, device="cuda"))
        return sum(p.numel() * p.element_size() for p in net.parameters())

    truth["cycle_bytes"] = build()
    torch.cuda.synchronize()
    snapshot_walked()
    truth["gc_enabled_after"] = gc.isenabled()


def h_optimizer_replaced():
    """An optimizer whose model was replaced: the old parameters and their Adam state are kept
    by the optimizer alone."""
    import torch

    model = torch.nn.Linear(2048, 2048).cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(torch.randn(64, 2048, device="cuda")).pow(2).mean().backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    truth["old_bytes"] = 3 * sum(p.numel() * p.element_size() for p in model.parameters())
    model = torch.nn.Linear(2048, 2048).cuda()  # BUG: the optimizer still has the old model
    globals()["model"], globals()["opt"] = model, opt
    torch.cuda.synchronize()
    snapshot_walked()


def h_cupy_dict():
    """A CuPy array kept in a dict by step."""
    import cupy as cp

    by_step = {}
    for step in range(5):
        by_step[step] = cp.ones(MIB, dtype=cp.float32)  # 4 MiB each
    cp.cuda.Device().synchronize()
    globals()["cache_by_step"] = by_step
    truth["arrays"] = len(by_step)
    truth["array_bytes"] = sum(a.nbytes for a in by_step.values())
    snapshot_walked()


def h_jax_list():
    """A JAX array kept in a global list."""
    import jax.numpy as jnp

    keep = [jnp.ones((4 * MIB,), dtype=jnp.uint8) + i for i in range(3)]
    for a in keep:
        a.block_until_ready()
    del a  # the list, not this loop's variable, must be what holds them
    globals()["jax_history"] = keep
    truth["arrays"] = len(keep)
    truth["array_bytes"] = sum(a.nbytes for a in keep)
    snapshot_walked()


def h_torch_cached():
    """In use vs cached per site from PyTorch's own allocator state: tensors kept and freed in
    segments of several sizes, compared at a snapshot with memory_allocated(), memory_reserved()
    and memory_snapshot()."""
    import torch

    keep, drop = [], []
    for i in range(40):
        n = (i % 5 + 1) * 300 * 1024 if i % 2 else (i % 3 + 1) * 5 * MIB
        (keep if i % 3 == 0 else drop).append(torch.empty(n, dtype=torch.uint8, device="cuda"))
    del drop
    torch.cuda.synchronize()
    torch_truth(torch)
    segs = torch.cuda.memory_snapshot()
    truth["segments"] = len(segs)
    truth["seg_total"] = sum(s["total_size"] for s in segs)
    truth["seg_allocated"] = sum(s["allocated_size"] for s in segs)
    snapshot_walked()
    return keep


def h_train_control():
    """Negative control: a plain training loop; parameters and optimizer state are held by the
    model and the optimizer, nothing else, and no suspect."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 512)).cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    total = 0.0
    for _ in range(200):
        x = torch.randn(256, 512, device="cuda")
        loss = model(x).pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total += loss.item()
    opt.zero_grad(set_to_none=True)
    del x, loss
    globals()["model"], globals()["opt"] = model, opt
    truth["param_state_bytes"] = 3 * sum(p.numel() * p.element_size() for p in model.parameters())
    torch.cuda.synchronize()
    snapshot_walked()


def p_api_torch():
    """The Python API under PyTorch (issue 15): 48 MiB of tensors kept, then
    gpushim.snapshot("torch-api") from the main thread returns the path of a file written with
    the label; its live device bytes are torch's reserved bytes at that instant (the caching
    allocator's segments). Its heap walk runs after the call returned: waited for here."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
    import gpushim
    import torch

    keep = [torch.empty(n * MIB, dtype=torch.uint8, device="cuda") for n in (16, 32)]
    torch_truth(torch)
    truth["tracing"] = gpushim.is_tracing()
    t0 = time.monotonic()
    path = gpushim.snapshot("torch-api", timeout=60)
    truth["snapshot_s"] = time.monotonic() - t0
    truth["path"] = path
    truth["exists"] = bool(path) and os.path.exists(path)
    truth["holders"] = gpushim.holders_path(path, timeout=20) if path else None
    truth["report_path"] = gpushim.report_path()
    return keep


# ---- issue 13: whose code a stack is, one suspect per cause ----


def line_of(marker):
    """The line of this file holding the comment `marker` (a line a check of compare.py names)."""
    with open(os.path.abspath(__file__)) as f:
        for i, line in enumerate(f, 1):
            if marker in line and "line_of(" not in line:
                return i
    return None


def t13_logits(compiled=False, steps=30):
    """A GPT-style training loop that keeps every step's logits (the output of its final
    nn.Linear projection, 8 x 128 x 32000 float32 = 125 MiB) in a list. The report must show one
    suspect headed by the model's line (without torch.compile) or the line calling the compiled
    model (with it), not a PyTorch C++ operator or Inductor's generated code."""
    import torch

    torch.manual_seed(0)
    vocab, d = 32000, 512

    class GPT(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(vocab, d)
            layer = torch.nn.TransformerEncoderLayer(d, 8, 4 * d, batch_first=True)
            self.blocks = torch.nn.TransformerEncoder(layer, 2)
            self.lm_head = torch.nn.Linear(d, vocab, bias=False)

        def forward(self, idx):
            x = self.blocks(self.emb(idx))
            return self.lm_head(x)  # T13: the model's line

    model = GPT().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    run = torch.compile(model) if compiled else model
    kept = []
    for _ in range(steps):
        idx = torch.randint(0, vocab, (8, 128), device="cuda")
        logits = run(idx)  # T13: the call's line
        loss = torch.nn.functional.cross_entropy(logits.view(-1, vocab), idx.view(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        kept.append(logits)  # BUG: every step's logits, and their graphs, kept
    torch.cuda.synchronize()
    torch_truth(torch)
    truth["steps"] = steps
    truth["logits_bytes"] = steps * kept[0].numel() * kept[0].element_size()
    truth["model_line"] = line_of("# T13: the model's line")
    truth["call_line"] = line_of("# T13: the call's line")
    truth["compiled"] = compiled
    return kept


def t13_autograd_cycle(steps=30):
    """backward(create_graph=True) on a loss of a leaf: the leaf's .grad has a graph that refers
    back to the leaf, a reference cycle through C++ that Python's collector cannot break, so each
    step's 16 MiB leaf and its 16 MiB gradient (computed on the autograd engine's thread) stay.
    The report must show one suspect at a user's line: the backward call's, which the engine
    thread's allocations get from the thread waiting in backward (named "autograd thread"), or
    the leaf's."""
    import torch

    for _ in range(steps):
        w = torch.randn(2048, 2048, device="cuda", requires_grad=True)  # T13: the leaf's line
        loss = (w * w).sum()
        loss.backward(create_graph=True)  # BUG: w.grad's graph keeps w, and w keeps w.grad; T13: backward
        del w, loss
    torch.cuda.synchronize()
    torch_truth(torch)
    truth["steps"] = steps
    truth["leaf_line"] = line_of("# T13: the leaf's line")
    truth["backward_line"] = line_of("T13: backward")


def r_torch_segments(n=1000):
    """Reachability (issue 17): 1,000 tensors of 3 MiB, each in a segment of its own, kept to the
    end: the exit report must say in one line that the segments are reachable by PyTorch's
    caching allocator, not list a thousand entries."""
    import torch

    keep = [torch.empty(3 * MIB, dtype=torch.uint8, device="cuda") for _ in range(n)]
    torch_truth(torch)
    truth["segments"] = len(torch.cuda.memory_snapshot())
    truth["tensors"] = n
    return keep


CASES = {
    "torch_default": lambda: case_torch("default"),
    "torch_expandable": lambda: case_torch("expandable_segments"),
    "torch_async": lambda: case_torch("cudaMallocAsync"),
    "torch_nocache": case_torch_nocache,
    "torch_pinned": case_torch_pinned,
    "cupy": case_cupy,
    "jax_platform": lambda: case_jax("platform"),
    "jax_default": lambda: case_jax("default"),
    "numba": case_numba,
    "S1": s1_aux_loss,
    "S2": s2_validation_outputs,
    "S3": s3_expandable,
    "S4": s4_cupy_pool,
    "S5": s5_jax_closure,
    "S6": s6_numba_pinned,
    "S8": s8_context_control,
    "stream_linear_20": lambda: stream_linear(20),
    "stream_linear_100": lambda: stream_linear(100),
    "jax_recompile": jax_recompile,
    "cupy_managed_pool": cupy_managed_pool,
    "numba_deferred_free": numba_deferred_free,
    "async_pool_keeps": async_pool_keeps,
    "H_hook": h_hook_cycle,
    "H_optimizer": h_optimizer_replaced,
    "H_cupy": h_cupy_dict,
    "H_jax": h_jax_list,
    "H_torch_cached": h_torch_cached,
    "H_train": h_train_control,
    "P_api": p_api_torch,
    "T13_logits": t13_logits,
    "T13_logits_compiled": lambda: t13_logits(compiled=True),
    "T13_autograd_cycle": t13_autograd_cycle,
    "R_torch": r_torch_segments,
}

if __name__ == "__main__":
    kept = CASES[CASE]()
    with open(TRUTH, "w") as f:
        json.dump(truth, f)
