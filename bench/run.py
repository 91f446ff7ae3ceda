"""``make bench``: how fast DDP trains on this machine, measured side by side in one run.

Prints one table per measurement and saves ``bench/results/bench.png`` (the
pictures) and ``bench/results/bench.json`` (every number):

1. scaling: at each global batch, samples/s of one rank using the whole
   machine (world 1), of N ranks (world N), and of one rank alone with one
   rank's resources and batch; the speed-up of world N over world 1, and
   DDP's own efficiency (world N against N ranks alone);
2. ``all_reduce`` between the ranks, by tensor size: the minimum time (what
   a call costs), the median and the maximum;
3. DDP's options at world N: ``bucket_cap_mb``, ``gradient_as_bucket_view``,
   and gradient accumulation with ``no_sync()`` (an exchange every 4 steps);
4. threads: world N with every rank using every core, against one thread
   per rank;
5. launches: each lesson stage's launch cell (02-06) as the notebooks run
   it, a new kernel's first launch, and the phases of a launch, forked from
   the warm server and as fresh interpreters;
6. with ``--notebooks``: each lesson notebook's execution time.

Every figure is a median with min and max over timing windows or launches
(the minimum alone for all-reduce costs); ratios are of medians from this
run. A warning says when the machine was busy or a spread too wide to
read a ratio from.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def section(title: str) -> None:
    print(f"\n== {title} ==", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: numbers say little")
    parser.add_argument(
        "--notebooks", action="store_true", help="also time every lesson notebook (slow)"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args(argv)
    if args.quick:
        os.environ["DDP_LESSON_BENCH_QUICK"] = "1"

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ddp_lesson import bench, devices, reports
    from ddp_lesson.views import plots

    plan = devices.plan()
    started = time.monotonic()
    print(f"ddp-lesson bench: {plan.backend}, {plan.gpus} GPU(s), {plan.cores} usable core(s)")
    others = bench.Others()  # what the rest of the machine does meanwhile
    results: dict = {"cores": plan.cores, "backend": plan.backend}
    how = bench.effort()
    print(
        f"timing windows of {how['window_s']:g} s, {how['windows']:g} per launch, "
        f"{how['repeats']:g} launches per setup"
    )

    section("1. scaling (NeuralNetwork on digits_shifted; samples per second)")
    scale = bench.scaling()
    world = scale[0]["world_size"]
    print(
        reports.table(
            scale,
            ["batch", "world1", "worldN", "speedup", "alone", "ddp_efficiency", "ceiling"],
            digits=2,
        )
    )
    print(
        f"world1: one rank with the whole machine; worldN: {world} ranks, "
        f"{scale[0]['threads']} thread(s) each; alone: one of those ranks by itself, on its "
        f"share of the batch; speedup = worldN / world1; ddp_efficiency = worldN / "
        f"({world} x alone); ceiling = {world} x alone / world1"
    )
    spread = [
        r["batch"]
        for key in ("world1", "worldN", "alone")
        for r in bench.unsteady(scale, key, f"{key}_min", f"{key}_max")
    ]
    if spread:
        print(f"warning: wide spread at global batch {sorted(set(spread))}: read those ratios "
              "with care")
    results["scaling"] = scale

    section(f"2. all_reduce between {world} ranks (ms)")
    wires = bench.allreduce(bench.ALLREDUCE_BYTES, world_size=world)
    print(reports.table(wires, ["size", "min_ms", "ms", "max_ms", "MB_per_s"], digits=3))
    print("min_ms: what one call costs; ms: the median; MB_per_s: at the minimum time")
    results["allreduce"] = wires

    ranks = [s for s in bench.default_setups() if s.world_size == world]
    many = min(ranks, key=lambda s: s.threads)  # the cores divided evenly
    trials = dict(repeats=int(how["repeats"]), windows=int(how["windows"]),
                  window_s=how["window_s"])  # fmt: skip

    section(f"3. DDP options at world {world}, global batch 1024 (samples per second)")
    options = [
        bench.Trial(1024),
        bench.Trial(1024, bucket_cap_mb=1),
        bench.Trial(1024, bucket_cap_mb=0.25),
        bench.Trial(1024, bucket_view=True),
        bench.Trial(1024, sync_every=4),
    ]
    knobs = bench.training([many], options, **trials)
    base = knobs[0]["samples_per_s"]
    knobs = [{**r, "vs_default": r["samples_per_s"] / base} for r in knobs]
    print(reports.table(knobs, ["trial", "samples_per_s", "min", "max", "vs_default"], digits=2))
    results["options"] = knobs

    crowded = [s for s in ranks if s.threads > many.threads]
    if crowded:
        section(f"4. threads at world {world}, global batch 1024 (samples per second)")
        threads = bench.training([many, crowded[0]], [bench.Trial(1024)], **trials)
        print(reports.table(threads, ["setup", "threads", "samples_per_s", "min", "max"],
                            digits=2))  # fmt: skip
        ratio = threads[1]["samples_per_s"] / threads[0]["samples_per_s"]
        print(f"every rank on every core: {ratio:.2f}x the samples/s of one thread per rank")
        results["threads"] = threads

    section("5. launches (seconds)")
    stages = bench.stage_launches()
    print("each lesson stage's launch cell, as its notebook runs it (forked ranks):")
    print(reports.table(stages, ["stage", "median", "min", "max"], digits=2))
    first = bench.first_launch()
    print(f"a new kernel's first launch (stage 05, the warm server's start included): "
          f"median {first['median']:.2f} s (min {first['min']:.2f}, max {first['max']:.2f})")
    phases = bench.startup(world, repeats=int(how["repeats"]) + 2, warm=True)
    fresh = bench.startup(world, repeats=int(how["repeats"]), warm=False)
    print("the phases of a launch, ranks forked from the warm server:")
    print(reports.table(phases, ["stage", "median", "min", "max"], digits=3))
    print("the same, each rank a fresh interpreter (plain mp.spawn):")
    print(reports.table(fresh, ["stage", "median", "min", "max"], digits=3))
    results.update(stages=stages, first_launch=first, phases=phases, phases_fresh=fresh)

    if args.notebooks:
        section("6. executing each lesson notebook (seconds, nothing saved)")
        paths = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
        times = bench.notebook_times(paths)
        times.append({"notebook": "all", "seconds": sum(r["seconds"] for r in times)})
        print(reports.table(times, ["notebook", "seconds"], digits=1))
        results["notebooks"] = times

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.2))
    plots.scaling_picture(scale, ax=axes[0])
    plots.allreduce_picture(wires, ax=axes[1])
    plots.startup_picture(phases, ax=axes[2])
    fig.tight_layout()
    args.out.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out / "bench.png", dpi=110)
    results["others_share"] = others.share()
    (args.out / "bench.json").write_text(json.dumps(results, indent=1))

    section("summary")
    top = scale[-1]
    print(
        f"at global batch {top['batch']}: {world} ranks train {top['speedup']:.2f}x the "
        f"samples/s of one rank with the whole machine; DDP's own efficiency "
        f"{top['ddp_efficiency']:.0%} ({world} ranks against {world} ranks alone)"
    )
    print(f"stage launch cells: median {max(r['median'] for r in stages):.2f} s at most; "
          f"a new kernel's first launch {first['median']:.2f} s")
    print(f"other processes kept {results['others_share']:.0%} of this machine's cores busy "
          "meanwhile")
    warning = bench.busy(others)
    if warning:
        print(warning)
    print(f"took {time.monotonic() - started:.0f} s; saved {args.out / 'bench.png'} and bench.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
