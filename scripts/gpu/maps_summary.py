"""Prints a summary of this process's writable mappings (/proc/self/smaps): how many bytes the
reachability scan would have to read, and how many of them are resident (for
scripts/gpu/perf_suite.py). Imported by the workload programs when GPUSHIM_SUITE_MAPS=1."""

import sys


def summary(top: int = 12) -> str:
    maps, cur = [], None
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if "-" in head[0] and len(head) >= 5 and ":" not in head[0]:
                lo, hi = (int(x, 16) for x in head[0].split("-"))
                cur = {"size": hi - lo, "perms": head[1], "name": " ".join(head[5:]), "rss": 0, "anon": 0, "swap": 0}
                maps.append(cur)
            elif cur is not None and head[0] in ("Rss:", "Anonymous:", "Swap:"):
                cur[{"Rss:": "rss", "Anonymous:": "anon", "Swap:": "swap"}[head[0]]] = int(head[1]) * 1024
    rw = [m for m in maps if m["perms"].startswith("rw")]
    gib = 1 << 30
    lines = [
        f"writable mappings: {len(rw)}, {sum(m['size'] for m in rw) / gib:.2f} GiB mapped, "
        f"{sum(m['rss'] for m in rw) / gib:.2f} GiB resident, {sum(m['swap'] for m in rw) / gib:.2f} GiB swapped"
    ]
    for m in sorted(rw, key=lambda m: -m["size"])[:top]:
        lines.append(
            f"  {m['size'] / (1 << 20):10.1f} MiB mapped {m['rss'] / (1 << 20):10.1f} MiB rss  {m['name'] or '[anon]'}"
        )
    return "\n".join(lines)


def main() -> None:
    print(summary(), file=sys.stderr)


if __name__ == "__main__":
    main()
