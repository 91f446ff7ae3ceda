"""``make bench``: how fast DDP trains on this machine, measured side by side in one run.

Prints one table per measurement and saves ``bench/results/bench.png`` (the
pictures) and ``bench/results/bench.json`` (every number):

1. training samples/s: one process, DDP world 1, DDP world 2 with
   cores // 2 threads per rank, and world 2 with every rank using all cores,
   at several global batch sizes; speed-up and scaling efficiency against
   DDP world 1;
2. ``all_reduce`` time and bandwidth for tensors of 4 KB ... 64 MB;
3. DDP's options at world 2: ``bucket_cap_mb``, ``gradient_as_bucket_view``,
   and gradient accumulation with ``no_sync()`` (exchange every 4 steps);
4. the stages of a small 2-rank launch: start and import,
   ``init_process_group``, first ``DDP()``, training,
   ``destroy_process_group``, exit and join;
5. with ``--notebooks``: each lesson notebook's execution time (minutes).

Every figure is a median with min and max over repeated timing windows or
launches; speed-ups are ratios of medians from this run. The load average
before and after is printed: numbers taken on a busy machine say little.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (1 min), {five:.2f} (5 min)"


def section(title: str) -> None:
    print(f"\n== {title} ==", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2, help="launches per setup (default 2)")
    parser.add_argument("--quick", action="store_true", help="one repeat, fewer sizes: a smoke run")
    parser.add_argument(
        "--notebooks", action="store_true", help="also time every lesson notebook (slow)"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args(argv)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ddp_lesson import bench, devices, reports

    plan = devices.plan()
    repeats = 1 if args.quick else args.repeats
    started = time.monotonic()
    print(f"ddp-lesson bench: {plan.describe().splitlines()[1]}, {plan.cores} cores")
    print(f"before: {load()}")
    results: dict = {"cores": plan.cores, "backend": plan.backend, "load_before": os.getloadavg()}

    section("1. training throughput (NeuralNetwork on digits_shifted)")
    batches = (256, 1024, 4096) if args.quick else bench.BATCHES
    setups = bench.default_setups()
    # windows of a second hold several steps even at the largest batch
    trials = [bench.Trial(b) for b in batches]
    rows = bench.training(setups, trials, repeats=repeats, window_s=0.5 if args.quick else 1.0)
    rows = bench.speedups(rows, "DDP world 1")
    same = [s.label for s in setups if s.ddp and s.world_size == 1 and s.threads < plan.cores]
    if same:  # the same threads per rank as world 2: what DDP itself costs
        per_rank = bench.speedups(rows, same[0])
        rows = [{**r, "per_rank": p["efficiency"]} for r, p in zip(rows, per_rank, strict=True)]
    columns = ["setup", "threads", "batch", "samples_per_s", "min", "max", "step_ms"]
    print(reports.table(rows, [*columns, "speedup", "efficiency", "per_rank"], digits=2))
    print(
        "speedup, efficiency: against DDP world 1 using every core; per_rank: efficiency "
        "against world 1 on one rank's share of the cores"
    )
    results["training"] = rows

    section("2. all_reduce between 2 ranks")
    sizes = bench.ALLREDUCE_BYTES[::2] if args.quick else bench.ALLREDUCE_BYTES
    world = plan.world_size if plan.gpus else 2
    wires = bench.allreduce(sizes, world_size=world, repeats=5 if args.quick else 10)
    print(reports.table(wires, ["size", "ms", "min_ms", "max_ms", "MB_per_s"], digits=3))
    results["allreduce"] = wires

    section(f"3. DDP options at world {world}, global batch 1024")
    ddp_setup = next(s for s in setups if s.label == f"DDP world {world}")
    options = [
        bench.Trial(1024),
        bench.Trial(1024, bucket_cap_mb=1),
        bench.Trial(1024, bucket_cap_mb=0.25),
        bench.Trial(1024, bucket_view=True),
        bench.Trial(1024, sync_every=4),
    ]
    knobs = bench.training([ddp_setup], options, repeats=repeats, window_s=1.0)
    base = knobs[0]["samples_per_s"]
    knobs = [{**r, "vs_default": r["samples_per_s"] / base} for r in knobs]
    print(reports.table(knobs, ["trial", "samples_per_s", "min", "max", "vs_default"], digits=2))
    results["options"] = knobs

    section(f"4. stages of a {world}-rank launch (seconds)")
    repeats = 2 if args.quick else 3
    stages = bench.startup(world, repeats=repeats)
    print("mp.spawn (the lesson's cells): each rank a new Python")
    print(reports.table(stages, ["stage", "median", "min", "max"], digits=3))
    warm = bench.startup(world, repeats=repeats * 2, warm=True)
    print("launch.start (checks, widgets, doctor): forked from a server with torch imported")
    print(reports.table(warm, ["stage", "median", "min", "max"], digits=3))
    ratio = stages[-1]["median"] / warm[-1]["median"]
    print(f"a warm launch takes 1/{ratio:.1f} of a cold one")
    results["startup"], results["startup_warm"] = stages, warm

    if args.notebooks:
        section("5. executing each lesson notebook (seconds, nothing saved)")
        paths = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
        times = bench.notebook_times(paths)
        times.append({"notebook": "all", "seconds": sum(r["seconds"] for r in times)})
        print(reports.table(times, ["notebook", "seconds"], digits=1))
        results["notebooks"] = times

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.2))
    bench.throughput_picture(rows, ax=axes[0])
    bench.allreduce_picture(wires, ax=axes[1])
    bench.startup_picture(stages, ax=axes[2])
    fig.tight_layout()
    args.out.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out / "bench.png", dpi=110)
    results["load_after"] = os.getloadavg()
    (args.out / "bench.json").write_text(json.dumps(results, indent=1))

    section("summary")
    for row in rows:
        if row["setup"] == ddp_setup.label:
            line = (
                f"{row['setup']} at global batch {row['batch']:>4}: {row['speedup']:.2f}x "
                f"the samples/s of DDP world 1 (efficiency {row['efficiency']:.0%}"
            )
            if "per_rank" in row:
                line += f"; {row['per_rank']:.0%} of two single-thread ranks"
            print(line + ")")
    print(f"after: {load()}")
    print(f"took {time.monotonic() - started:.0f} s; saved {args.out / 'bench.png'} and bench.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
