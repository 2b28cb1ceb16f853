"""Multi-process GPU cases for scripts/gpu-matrix.sh (issue 14: whole jobs). Started by torchrun
with two ranks (`python3 -m torch.distributed.run --standalone --nproc_per_node=2 job_cases.py
CASE OUT_DIR`) under `gpushim run`; each rank writes its framework's own counters to
OUT_DIR/truth-rank<R>.json, and compare.py checks them against the job view
(`gpushim report OUT_DIR --format json`, saved as job.json).

Cases:
  ddp                    DistributedDataParallel training of a small MLP over NCCL, 20 steps;
                         truth: torch.cuda.memory_reserved() / memory_allocated() per rank.
  gpu0_before_set_device every rank makes an 8 MiB tensor before torch.cuda.set_device
                         (it lands on GPU 0), then 16 MiB on its own GPU: rank 1 is flagged.
  leak_one_rank          both ranks churn 1 MiB tensors for 40 steps; rank 1 also keeps one per
                         step (a leak of rank 1 only). Run with PYTORCH_NO_CUDA_MEMORY_CACHING=1
                         so that each tensor is one cudaMalloc.
"""

import json
import os
import sys
import time

MIB = 1 << 20
CASE, OUT = sys.argv[1], sys.argv[2]
RANK, LOCAL = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
truth = {"rank": RANK, "local_rank": LOCAL}


def write_truth():
    with open(os.path.join(OUT, f"truth-rank{RANK}.json"), "w") as f:
        json.dump(truth, f)


def case_ddp():
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.cuda.set_device(LOCAL)
    dist.init_process_group("nccl", device_id=torch.device("cuda", LOCAL))
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)).cuda()
    ddp = DDP(model, device_ids=[LOCAL])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    for _ in range(20):
        x = torch.randn(256, 1024, device="cuda")
        loss = ddp(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.barrier()
    torch.cuda.synchronize()
    truth["reserved"] = torch.cuda.memory_reserved()
    truth["allocated"] = torch.cuda.memory_allocated()
    truth["device"] = torch.cuda.current_device()
    write_truth()
    dist.destroy_process_group()
    return ddp, opt


def case_gpu0_before_set_device():
    import torch

    early = torch.empty(8 * MIB, dtype=torch.uint8, device="cuda")  # current device: 0
    torch.cuda.set_device(LOCAL)
    own = torch.empty(16 * MIB, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    truth["early_device"] = early.device.index
    truth["own_device"] = own.device.index
    write_truth()
    return early, own


def case_leak_one_rank():
    import torch

    torch.cuda.set_device(LOCAL)
    kept = []
    for _ in range(40):
        scratch = torch.empty(MIB, dtype=torch.uint8, device="cuda")
        del scratch
        if RANK == 1:
            kept.append(torch.empty(MIB, dtype=torch.uint8, device="cuda"))
        time.sleep(0.01)
    torch.cuda.synchronize()
    truth["kept"] = len(kept)
    truth["kept_bytes"] = len(kept) * MIB
    write_truth()
    return kept


CASES = {
    "ddp": case_ddp,
    "gpu0_before_set_device": case_gpu0_before_set_device,
    "leak_one_rank": case_leak_one_rank,
}

if __name__ == "__main__":
    keep = CASES[CASE]()
