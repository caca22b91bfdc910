#!/usr/bin/env python3
"""Renders Google Benchmark JSON files into the summary section of docs/benchmarks.md.

Two tables: every benchmark with its time and its ratios to the headroom twins (counters whose
name ends in _ratio: the twin's time over the benchmark's, 1.0 = as fast as the twin), and every
ring benchmark against its flat twin (same name with /flat/ for /ring/; where the ring benchmark
timed the flat storage itself, interleaved with its own calls, counter flat_us, that time). The
section between the markers is replaced; the rest of the document is kept. Standard library
only.
"""
import argparse
import json
import os
import platform
import re
import subprocess
import sys
from datetime import datetime, timezone

BEGIN = "<!-- bench-summary:begin (scripts/bench.sh writes this section) -->"
END = "<!-- bench-summary:end -->"
TO_US = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}


def machine():
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} logical CPUs, {platform.system()} {platform.release()}"


def commit(outputs):
    """HEAD, marked when files other than this run's outputs (`outputs`) are modified."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        excludes = [":(exclude)" + os.path.relpath(os.path.abspath(p)) for p in outputs]
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", "."]
                               + excludes, capture_output=True, text=True,
                               check=True).stdout.strip()
        return head + (" (with uncommitted changes)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def load_runs(paths):
    runs, contexts = [], []
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        contexts.append((os.path.basename(path), data.get("context", {})))
        for run in data.get("benchmarks", []):
            if run.get("run_type", "iteration") != "iteration" or "error_occurred" in run:
                continue
            runs.append((os.path.basename(path), run))
    return runs, contexts


def time_us(run):
    # The attention benchmarks report their best call; the rest the mean real time.
    if "best_us" in run:
        return float(run["best_us"])
    return float(run["real_time"]) * TO_US.get(run.get("time_unit", "ns"), 1e-3)


def fmt(x):
    if x >= 100:
        return f"{x:.0f}"
    if x >= 10:
        return f"{x:.1f}"
    return f"{x:.3g}"


def render(runs, contexts, load, command, json_paths, doc):
    lines = [BEGIN, "", "## Summary of the last `scripts/bench.sh` run", ""]
    lines.append(f"- Command: `{command.strip()}`")
    lines.append(f"- Commit: {commit(list(json_paths) + [doc])}")
    lines.append(f"- Machine: {machine()}; load average at the start: {load}")
    lines.append(f"- Date: {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}")
    for name, ctx in contexts:
        build = ctx.get("library_build_type", "?")
        version = ctx.get("library_version")
        lines.append(f"- `{name}`: Google Benchmark{' ' + version if version else ''} "
                     f"({build} library build as it reports), {ctx.get('num_cpus', '?')} CPUs "
                     f"at {ctx.get('mhz_per_cpu', '?')} MHz")
    lines.append("- JSON: " + ", ".join(f"`{p}`" for p in json_paths) + ". Time is `best_us` "
                 "where the benchmark reports it, else the mean real time.")
    lines.append("")

    ratio_keys = sorted({k for _, r in runs for k in r if k.endswith("_ratio")})
    lines.append("### Against the headroom twins")
    lines.append("")
    lines.append("A ratio is the twin's time (memcpy, a plain read or FMAs of the same bytes or "
                 "work) over the benchmark's: 1.0 runs at the twin's speed.")
    lines.append("")
    header = ["benchmark", "time (us)", "GB/s"] + ratio_keys
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|" + "---|" * len(header))
    for _, run in runs:
        gbs = run.get("bytes_per_second")
        row = [f"`{run['name']}`", fmt(time_us(run)), fmt(gbs / 1e9) if gbs else ""]
        row += [fmt(float(run[k])) if k in run else "" for k in ratio_keys]
        lines.append("| " + " | ".join(row) + " |")
    lines.append("")

    by_name = {run["name"]: run for _, run in runs}
    pairs = []
    for name, run in by_name.items():
        if "/ring" not in name:
            continue
        flat_name = re.sub(r"/ring(?=/|$)", "/flat", name)
        if flat_name in by_name:
            pairs.append((name, run, by_name[flat_name]))
    lines.append("### Ring against flat")
    lines.append("")
    if pairs:
        lines.append("Same history and visible range; ratio = ring time / flat time (1.0: no "
                     "cost for the ring). Where the ring benchmark ran the flat storage itself, "
                     "its calls interleaved with the ring's (counter `flat_us`, marked *), that "
                     "pair is compared; otherwise the two benchmarks' own times.")
        lines.append("")
        lines.append("| benchmark (ring) | ring (us) | flat (us) | ring / flat |")
        lines.append("|---|---|---|---|")
        for name, ring, flat in pairs:
            r = time_us(ring)
            f, mark = (float(ring["flat_us"]), "*") if "flat_us" in ring else (time_us(flat), "")
            lines.append(f"| `{name}` | {fmt(r)} | {fmt(f)}{mark} | {r / f:.2f} |")
    else:
        lines.append("No ring/flat pairs in this run.")
    lines.append("")

    # Thread scaling: every /threadsN benchmark (N > 1). Where it timed one thread itself, its
    # calls interleaved with its own (counters speedup, fma_twin_speedup, read_twin_speedup),
    # those; otherwise its /threads1 twin's time, from a run minutes apart.
    scaling = []
    for name, run in by_name.items():
        m = re.search(r"/threads(\d+)(?=/|$)", name)
        if not m or m.group(1) == "1":
            continue
        one = by_name.get(name[:m.start()] + "/threads1" + name[m.end():])
        if "speedup" in run or one is not None:
            scaling.append((name, one, run))
    if scaling:
        lines.append("### Threads")
        lines.append("")
        lines.append("Speed-up = one thread's time / N threads' time. The twins run on the "
                     "benchmark's threads too; their speed-up is what this machine's cores gave "
                     "together at the time (two vCPUs may share one core's FMA units). Marked *: "
                     "the benchmark ran the call and the twins on one thread itself, interleaved "
                     "with its own calls (counters `speedup`, `fma_twin_speedup`, "
                     "`read_twin_speedup`); otherwise the `/threads1` benchmark's times.")
        lines.append("")
        lines.append("| benchmark | one thread (us) | speed-up | FMA twin speed-up "
                     "| read twin speed-up |")
        lines.append("|---|---|---|---|---|")
        for name, one, many in scaling:
            tn = time_us(many)
            if "speedup" in many:
                t1 = float(many["one_thread_us"]) if "one_thread_us" in many else tn * float(
                    many["speedup"])
                cells = [f"`{name}`", f"{fmt(t1)}*", f"{float(many['speedup']):.2f}"]
                for key in ("fma_twin_speedup", "read_twin_speedup"):
                    cells.append(f"{float(many[key]):.2f}" if key in many else "")
            else:
                t1 = time_us(one)
                cells = [f"`{name}`", fmt(t1), f"{t1 / tn:.2f}"]
                for key in ("fma_ratio", "read_ratio"):
                    if key in one and key in many and float(many[key]) > 0:
                        twin1 = float(one[key]) * t1
                        twinn = float(many[key]) * tn
                        cells.append(f"{twin1 / twinn:.2f}")
                    else:
                        cells.append("")
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    lines.append(END)
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--doc", required=True)
    parser.add_argument("--load", default="unknown")
    parser.add_argument("--command", default="bash scripts/bench.sh")
    parser.add_argument("jsons", nargs="+")
    args = parser.parse_args()
    runs, contexts = load_runs(args.jsons)
    if not runs:
        print("bench_summary.py: no benchmark results in " + " ".join(args.jsons),
              file=sys.stderr)
        return 1
    section = render(runs, contexts, args.load, args.command, args.jsons, args.doc)
    text = open(args.doc).read() if os.path.exists(args.doc) else "# Benchmarks\n"
    if BEGIN in text and END in text:
        before = text[:text.index(BEGIN)]
        after = text[text.index(END) + len(END):].lstrip("\n")
        text = before + section + ("\n" + after if after else "")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    with open(args.doc, "w") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
