"""Unit tests of the heap walker (shim/src/python/holders.py, embedded in libgpushim.so) on
synthetic object graphs: the shortest path from the roots, its rendering and grouping, the
GC's reference-count test for objects held from native code, unreachable cycles, the
time cap, and that the walker runs no user code and leaves the GC and sys.modules alone."""

import gc
import sys
import threading
from pathlib import Path

import pytest

WALKER = Path(__file__).resolve().parents[2] / "shim/src/python/holders.py"


@pytest.fixture(scope="module")
def hw():
    ns = {"__builtins__": __builtins__}
    exec(compile(WALKER.read_text(), "<gpushim-heap-walk>", "exec"), ns)
    return ns


class Buf:
    """An object with __cuda_array_interface__ in its instance dict; __getattr__ must not run."""

    calls = 0

    def __init__(self, ptr, n):
        self.__cuda_array_interface__ = {"data": (ptr, False), "shape": (n,), "typestr": "|u1", "version": 3}

    def __getattr__(self, name):
        Buf.calls += 1
        raise AttributeError(name)


class Prop:
    """The interface as a class property (Numba's way)."""

    def __init__(self, ptr):
        self.ptr = ptr

    @property
    def __cuda_array_interface__(self):
        return {"data": (self.ptr, False), "shape": (2, 3), "typestr": "<f8", "strides": None}


def paths(hw, roots):
    """{ptr: steps} for each object found from `roots` (a list of (label, object))."""
    w = hw["Walk"](roots, hw["_Finder"]({})).run()
    return {got["ptr"]: hw["render"](w, i, False, {}) for i, got in w.found}


def test_shortest_path_wins_and_is_rendered_for_a_person(hw):
    b = Buf(0x100, 64)
    deep = {"x": [[b]]}
    shallow = {"k": b}
    mod = {"deep": deep, "short": shallow}
    got = paths(hw, [(("global", "train"), mod)])
    assert got == {0x100: ["train global 'short'", "dict['k']"]}
    # An imported module with a file is named by its path, as its frames are (the collector
    # shortens both alike); the module's name only stands where there is no file.
    mod["__file__"] = "/home/u/proj/train.py"
    got = paths(hw, [(("global", "train"), mod)])
    assert got == {0x100: ["/home/u/proj/train.py global 'short'", "dict['k']"]}


def test_lists_tuples_attributes_class_attributes_and_closures(hw):
    a, b, c, d = Buf(1, 8), Buf(2, 8), Buf(3, 8), Buf(4, 8)

    class Model:
        weights = a

    class Holder:
        pass

    h = Holder()
    h.buf = b

    def make(x):
        def f():
            return x

        return f

    mod = {"Model": Model, "h": h, "fn": make(c), "t": (0, [None, d])}
    got = paths(hw, [(("global", "m"), mod)])
    assert got[1] == ["m global 'Model'", "Model.weights"]
    assert got[2] == ["m global 'h'", "Holder.buf"]
    assert got[3][0] == "m global 'fn'" and got[3][1].endswith("make.<locals>.f closure 'x'")
    assert got[4] == ["m global 't'", "tuple[1]", "list[1]"]


def test_a_frame_root_names_function_line_and_variable(hw):
    ready, done = threading.Event(), threading.Event()

    def worker():
        local_buf = Buf(0x77, 16)
        ready.set()
        done.wait()
        return local_buf

    t = threading.Thread(target=worker, name="loader")
    t.start()
    ready.wait()
    try:
        roots = hw["roots_of"]({}, sys._current_frames())
        w = hw["Walk"](roots, hw["_Finder"]({})).run()
        found = [hw["render"](w, i, False, sys.modules) for i, got in w.found if got["ptr"] == 0x77]
    finally:
        done.set()
        t.join()
    assert len(found) == 1
    # The whole file name: the collector names it as it names a frame's file.
    assert found[0][0].startswith(f"function 'worker' ({worker.__code__.co_filename}:")
    assert found[0][0].endswith(") local 'local_buf' in thread 'loader'")


def test_siblings_share_one_generic_line(hw):
    bufs = [Buf(i, 4) for i in range(400)]
    w = hw["Walk"]([(("global", "m"), {"history": bufs})], hw["_Finder"]({})).run()
    lines = {tuple(hw["render"](w, i, True, {})) for i, _ in w.found}
    assert lines == {("m global 'history'", "list[*]")}
    assert len(w.found) == 400


def test_the_interface_extent_of_views_and_properties(hw):
    ext = hw["_cai_extent"]
    assert ext({"data": (1000, False), "shape": (4, 5), "typestr": "<f4"}) == (1000, 80)
    # A transposed view: strides (4, 20) over 5 x 4 float32 covers the same 80 bytes.
    assert ext({"data": (1000, False), "shape": (5, 4), "typestr": "<f4", "strides": (4, 20)}) == (1000, 80)
    # A reversed view starts below its pointer.
    assert ext({"data": (1000, False), "shape": (3,), "typestr": "<f8", "strides": (-8,)}) == (984, 24)
    assert ext({"data": (1000, False), "shape": (0,), "typestr": "<f8"}) == (1000, 0)
    assert ext({"data": ("x", False), "shape": (1,), "typestr": "<f8"}) is None
    assert ext({"data": (1, False), "shape": (1,), "typestr": "<f8", 3: 4}) is None
    info = hw["_Finder"]({}).info(Prop(0x500))
    assert (info["ptr"], info["nbytes"], info["desc"]) == (0x500, 48, "Prop(2, 3) <f8")


def test_external_references_follow_the_gcs_test(hw):
    held = Buf(0x9, 1)
    cycle_a, cycle_b = [], []
    cycle_a.append(cycle_b)
    cycle_b.append(cycle_a)
    alone = [held]
    objs = [cycle_a, cycle_b, alone]
    ext, referrer = hw["external_refs"](objs)
    # cycle_a and cycle_b: held by this test's locals only (one each) beyond each other;
    # alone: this frame's local.
    assert ext == [1, 1, 1]
    assert referrer[:2] == [1, 0]
    del cycle_a, cycle_b, alone
    ext, _ = hw["external_refs"](objs)
    assert ext == [0, 0, 0]


def test_unreachable_cycles_and_native_holders(hw):
    was = gc.isenabled()
    gc.disable()
    try:

        class Net:
            pass

        n = Net()
        n.me = n
        n.buf = Buf(0xC0, 32)
        del n
        w = hw["Walk"](hw["roots_of"](sys.modules, sys._current_frames()), hw["_Finder"](sys.modules)).run()
        extra = {id(w.queue), id(w.parent), id(w.index), id(w.label), id(w.found), id(w.roots)}
        out = hw["analyse_unreached"](w, extra)
        mine = [(how, steps) for got, how, steps, _o in out if got["ptr"] == 0xC0]
        assert mine == [("cycle", ["unreachable reference cycle (Net)"])]
    finally:
        if was:
            gc.enable()


def test_walk_cut_at_its_deadline(hw):
    big = [[i] for i in range(20000)]
    w = hw["Walk"]([(("global", "m"), {"big": big})], hw["_Finder"]({}), deadline_ns=0).run()
    # A deadline already past still walks the first chunk (CHECK_EVERY + 1 objects).
    assert w.cut and w.visited == hw["CHECK_EVERY"] + 1
    w = hw["Walk"]([(("global", "m"), {"big": big})], hw["_Finder"]({}), deadline_ns=None).run()
    assert not w.cut and w.visited > 20000


def test_walk_emits_touches_nothing_and_never_raises(hw):
    Buf.calls = 0
    keep = [Buf(0x1234, 8)]  # noqa: F841 - found through this frame
    before = set(sys.modules)
    was = gc.isenabled()
    got = []
    hw["walk"](1, 7, 2000, got.append)
    assert gc.isenabled() == was
    assert set(sys.modules) == before
    assert Buf.calls == 0
    head = [int.from_bytes(got[0][i * 8 : i * 8 + 8], "little") for i in range(5)]
    assert head[:3] == [1, 7, 0]

    def boom(_):
        raise RuntimeError("emit failed")

    hw["walk"](1, 8, 2000, boom)  # must not raise


def test_a_proxy_in_sys_modules_runs_no_code(hw):
    calls = []

    class Proxy:
        """A lazy-module proxy: isinstance(m, ModuleType) would read its __class__."""

        def __getattribute__(self, name):
            calls.append(name)
            return object.__getattribute__(self, name)

    sys.modules["gpushim_test_proxy"] = Proxy()
    try:
        hw["walk"](1, 9, 2000, lambda _: None)
    finally:
        del sys.modules["gpushim_test_proxy"]
    assert calls == []


def test_paths_through_one_big_container_cost_linear_time(hw):
    """Each found object's path names its key in the dictionary that holds it: looked up once per
    dictionary, not once per object (20,000 buffers in one dict took 15 s)."""
    import time

    def walk_time(n):
        bufs = {i: Buf(0x100000 + i, 1) for i in range(n)}
        layers = [[Buf(0x200000 + i, 1)] for i in range(n)]
        roots = [(("global", "m"), {"bufs": bufs, "layers": layers})]
        w = hw["Walk"](roots, hw["_Finder"]({})).run()
        t = time.perf_counter()
        memo = {}
        paths = {tuple(hw["render"](w, i, True, {}, memo)) for i, _ in w.found}
        took = time.perf_counter() - t
        assert ("m global 'bufs'", "dict[*]") in paths and ("m global 'layers'", "list[7]", "list[*]") in paths
        return took

    small, big = min(walk_time(1000) for _ in range(3)), min(walk_time(8000) for _ in range(3))
    # Linear: 8 times the objects, about 8 times the time; quadratic would be 64 times.
    assert big < small * 24, (small, big)


def fake_torch():
    """A stand-in for the parts of torch the walker reads: torch._C.TensorBase, tensors with
    C-level (slot) attributes grad_fn and output_nr, and autograd nodes with next_functions."""
    import contextlib
    import types

    torch = types.ModuleType("torch")
    c = types.ModuleType("torch._C")
    torch._C = c

    class TensorBase:
        __slots__ = ("__weakref__", "grad", "grad_fn", "n", "output_nr", "ptr", "requires_grad", "shape")

        def __init__(self, ptr, n, grad_fn=None, output_nr=0):
            self.grad = None
            self.ptr, self.n, self.shape = ptr, n, (n // 4,)
            self.grad_fn, self.output_nr, self.requires_grad = grad_fn, output_nr, grad_fn is not None

        device = types.SimpleNamespace(type="cuda", index=0)
        dtype = "torch.float32"

        def untyped_storage(self):
            return types.SimpleNamespace(data_ptr=lambda: self.ptr, nbytes=lambda: self.n)

    c.TensorBase = TensorBase
    c.DisableTorchFunctionSubclass = contextlib.nullcontext
    return torch, TensorBase


def node_type(name):
    return type(name, (), {"__slots__": ("next_functions",)})


def test_autograd_graphs_are_counted_once_and_name_what_saved_a_tensor(hw):
    """The graph of an accumulated tensor (AddBackward0 ← AddBackward0 ← AbsBackward0 ←
    AddmmBackward0, and a second root sharing part of it) is followed along next_functions and
    counted once; a tensor held only from native code whose grad_fn is in that graph is 'saved
    by autograd for' the node that takes it as input, reached from the accumulating variable.
    No node's saved tensors are read."""
    import ctypes

    torch, TB = fake_torch()
    Addmm, Abs, Add, Mul = (node_type(n) for n in ("AddmmBackward0", "AbsBackward0", "AddBackward0", "MulBackward0"))
    mm = Addmm()
    mm.next_functions = ((None, 0),)
    ab = Abs()
    ab.next_functions = ((mm, 0),)
    add1 = Add()
    add1.next_functions = ((ab, 0),)
    add2 = Add()
    add2.next_functions = ((add1, 0), (ab, 0))
    other = Mul()
    other.next_functions = ((mm, 0),)
    total = TB(0x1000, 4, add2)
    second = TB(0x2000, 4, other)
    saved = TB(0x3000, 4096, mm)  # the output of AddmmBackward0 that AbsBackward0 saved
    saved_id = id(saved)
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(saved))  # as a C++ holder would
    try:
        modules = {"torch": torch}
        finder = hw["_Finder"](modules)
        w = hw["Walk"]([(("global", "train"), {"total_aux": total, "other": second})], finder).run()
        graphs = hw["Graphs"](finder)
        for i, _ in w.found:
            graphs.add(i, w.queue[i])
        # total's graph: add2, add1, ab, mm (4 nodes); second's: only its own node is new.
        assert [n for _, n in graphs.graphs] == [4, 1]
        g, saved_for = graphs.link(saved)
        assert (g, saved_for) == (0, "AbsBackward0")
        assert hw["render"](w, graphs.graphs[0][0], True, {}) == ["train global 'total_aux'"]
        # A tensor whose grad_fn is in no graph met is not linked.
        assert graphs.link(TB(0x4000, 4, Mul())) is None
        graphs.clear()
        del saved  # now only the native reference keeps it
        was = gc.isenabled()
        gc.disable()
        try:
            w2 = hw["Walk"](hw["roots_of"](sys.modules, sys._current_frames()), finder).run()
            g2 = hw["Graphs"](finder)
            for i, _ in w2.found:
                g2.add(i, w2.queue[i])
            extra = {id(w2.queue), id(w2.parent), id(w2.index), id(w2.label), id(w2.found), id(w2.roots)}
            out = hw["analyse_unreached"](w2, extra, g2)
            mine = [(how, link[1]) for got, how, link, _o in out if got["ptr"] == 0x3000]
            assert mine == [("autograd", "AbsBackward0")]
        finally:
            if was:
                gc.enable()
    finally:
        ctypes.pythonapi.Py_DecRef(ctypes.cast(saved_id, ctypes.py_object))


def test_torch_allocator_state_only_when_cuda_is_initialized(hw):
    import types

    torch, _ = fake_torch()
    cuda = types.ModuleType("torch.cuda")
    torch.cuda = cuda
    calls = []
    state = {"init": False}

    def is_initialized():
        return state["init"]

    frames = [{"filename": "/u/gpt.py", "line": 30, "name": "forward"}, {"filename": "/u/gpt.py", "line": 9}]
    blocks = [
        {"address": 0x10, "size": 512, "state": "active_allocated", "frames": frames},
        {"address": 0x210, "size": 512, "state": "active_allocated", "frames": frames[:1]},
        {"address": 0x410, "size": 1024, "state": "inactive", "frames": frames},
        {"address": 0x810, "size": 64, "state": "active_allocated", "frames": []},
        "junk",
    ]

    def _snapshot():
        calls.append(1)
        return {
            "segments": [{"address": 0x10, "total_size": 2 << 20, "allocated_size": 1024, "blocks": blocks}, "junk"]
        }

    memory = types.ModuleType("torch.cuda.memory")
    cuda.is_initialized, cuda.memory, memory._snapshot = is_initialized, memory, _snapshot
    assert hw["_torch_segments"]({"torch": torch}) is None
    assert calls == []
    state["init"] = True
    # The segments; the live blocks with a recorded stack, each stack once (a frame without a
    # line is left out), the freed block and the block without frames not listed.
    # Grouped by segment and stack: [segment, blocks, bytes, stack].
    assert hw["_torch_segments"]({"torch": torch}) == (
        [[0x10, 2 << 20, 1024]],
        [[["/u/gpt.py", 30, "forward"]]],
        [[0x10, 2, 1024, 0]],
    )
    assert hw["_torch_segments"]({}) is None


def test_torch_history_turns_the_record_on_once_cuda_is_up_and_never_over_the_programs(hw, monkeypatch):
    import types

    torch, _ = fake_torch()
    cuda, memory = types.ModuleType("torch.cuda"), types.ModuleType("torch.cuda.memory")
    torch.cuda, cuda.memory = cuda, memory
    state = {"init": False, "snap": {"segments": [], "device_traces": [[]]}}
    calls = []

    def is_initialized():
        return state["init"]

    def _snapshot():
        return state["snap"]

    def _record_memory_history(**kw):
        calls.append(kw)

    cuda.is_initialized = is_initialized
    memory._snapshot, memory._record_memory_history = _snapshot, _record_memory_history
    monkeypatch.setitem(sys.modules, "torch", torch)
    assert hw["torch_history"]() == hw["TORCH_NOT_YET"]
    state["init"] = True
    assert hw["torch_history"]() == hw["TORCH_ON"]
    assert calls == [{"enabled": "state", "context": "alloc", "stacks": "python"}]
    # The program's own record: a trace entry, or a block with frames.
    state["snap"] = {"segments": [], "device_traces": [[{"action": "alloc"}]]}
    assert hw["torch_history"]() == hw["TORCH_PROGRAMS"]
    state["snap"] = {"segments": [{"blocks": [{"frames": [{"line": 1}]}]}], "device_traces": [[]]}
    assert hw["torch_history"]() == hw["TORCH_PROGRAMS"]
    assert len(calls) == 1

    # A failing record is an answer, never an exception into the program.
    def broken(**kw):
        raise RuntimeError("cudaMallocAsync does not yet support recordHistory")

    state["snap"] = {"segments": [], "device_traces": [[]]}
    memory._record_memory_history = broken
    assert hw["torch_history"]() == hw["TORCH_UNAVAILABLE"]

    # A snapshot that fails now, or a memory module not there yet: asked again later.
    def failing():
        raise RuntimeError("busy")

    memory._snapshot = failing
    assert hw["torch_history"]() == hw["TORCH_NOT_YET"]
    del cuda.memory
    assert hw["torch_history"]() == hw["TORCH_NOT_YET"]
    monkeypatch.delitem(sys.modules, "torch")
    assert hw["torch_history"]() == hw["TORCH_NOT_YET"]


def test_leaves_kept_by_a_graph_and_gradients(hw):
    """A parameter held only by a graph's AccumulateGrad node is linked to that graph; a
    parameter's .grad (C++ state, no Python referent) is found and named `.grad`."""
    torch, TB = fake_torch()
    Acc = type("AccumulateGrad", (), {"__slots__": ("next_functions", "variable")})
    T = node_type("TBackward0")
    leaf = TB(0x5000, 64)
    leaf.requires_grad = True
    acc = Acc()
    acc.next_functions, acc.variable = (), leaf
    t = T()
    t.next_functions = ((acc, 0),)
    out = TB(0x6000, 4, t)
    param = TB(0x7000, 16)
    param.grad = TB(0x8000, 16)
    finder = hw["_Finder"]({"torch": torch})
    w = hw["Walk"]([(("global", "m"), {"out": out, "p": param})], finder).run()
    graphs = hw["Graphs"](finder)
    for i, _ in w.found:
        graphs.add(i, w.queue[i])
    assert graphs.link(leaf) == (0, "AccumulateGrad")
    got = {g["ptr"]: hw["render"](w, i, False, {}) for i, g in w.found}
    assert got[0x8000] == ["m global 'p'", "TensorBase.grad"]
    graphs.clear()


def test_roles_parameters_gradients_and_optimizer_state(hw):
    """A tensor's role is told by class identity and by how it was reached: a Parameter (a
    subclass of torch.nn.parameter.Parameter), the `.grad` of a tensor found, a tensor reached
    through an optimizer's `state`; any other tensor has none, even one named like a parameter."""
    import collections
    import types

    torch, TB = fake_torch()
    nn_param = types.ModuleType("torch.nn.parameter")
    optim = types.ModuleType("torch.optim.optimizer")

    class Parameter(TB):
        __slots__ = ()

    class Optimizer:
        def __init__(self, params):
            self.param_groups = [{"params": list(params)}]
            self.state = collections.defaultdict(dict)

    AdamW = type("AdamW", (Optimizer,), {})
    nn_param.Parameter, optim.Optimizer = Parameter, Optimizer
    Weight = type("Parameter", (TB,), {"__slots__": ()})  # a name alone says nothing
    w = Parameter(0x1000, 64)
    w.grad = TB(0x2000, 64)
    opt = AdamW([w])
    opt.state[w] = {"exp_avg": TB(0x3000, 64), "exp_avg_sq": TB(0x4000, 64)}
    model = types.SimpleNamespace(weight=w, named=Weight(0x5000, 64))
    modules = {"torch": torch, "torch.nn.parameter": nn_param, "torch.optim.optimizer": optim}
    finder = hw["_Finder"](modules)
    walk = hw["Walk"]([(("global", "train"), {"model": model, "opt": opt, "x": TB(0x6000, 64)})], finder).run()
    roles = {got["ptr"]: hw["role_of"](walk, i, walk.queue[i]) for i, got in walk.found}
    assert roles == {
        0x1000: "parameter",
        0x2000: "grad",
        0x3000: "optimizer_state",
        0x4000: "optimizer_state",
        0x5000: None,
        0x6000: None,
    }
    # Without torch.optim imported, nothing is optimizer state.
    finder = hw["_Finder"]({"torch": torch, "torch.nn.parameter": nn_param})
    walk = hw["Walk"]([(("global", "train"), {"opt": opt})], finder).run()
    assert {got["ptr"]: hw["role_of"](walk, i, walk.queue[i]) for i, got in walk.found}[0x3000] is None


def test_objects_get_the_stack_of_the_block_they_start_in(hw):
    objects = [{"ptr": 0x2100}, {"ptr": 0x1000}, {"ptr": 0x9000}, {"ptr": 0x1800}]
    hw["_mark_stacks"](objects, [(0x2000, 0x800, 1), (0x1000, 0x800, 0)])
    assert [o.get("stack") for o in objects] == [1, 0, None, None]
