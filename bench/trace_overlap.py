#!/usr/bin/python3
"""Share of gradient communication hidden behind backward, from scaletrain traces.

Reads the Chrome traces `scaletrain train --trace FILE_%r.json` writes (one per
rank): "backward ..." spans on the compute track (tid 1, args step/micro) and
one span per gradient bucket's collective on the communication track (tid 2,
cat "comm", from issue to finish, args step).

For every communicating backward (a backward pass that issued collectives:
the last micro-batch of a step, every micro-batch under ZeRO-2):

    window  = [start of its first backward span, end of its last one]
    comm    = union of its collective spans (they overlap one another: the
              buckets are issued as layers finish and run concurrently)
    hidden  = |comm intersected with window|
    exposed = |comm| - hidden  (communication still running after backward)

and the share hidden = hidden / |comm|. A collective belongs to the latest
backward of its step that started at or before the collective was issued.

Prints, per rank, the backwards kept (those of the first --skip steps are
dropped: warm-up), the aggregate share (sum hidden / sum comm over them), the
median and smallest per-backward share, the mean backward window, collective
time and exposed time, and the same over all ranks. Given several ranks'
traces, it also splits the exposed time (see cross_rank): how far apart the
ranks' backward passes end, and how much collective time is left after the
slowest rank's backward. With --metrics RUN/metrics.jsonl (rank 0's), it
prints the mean grad_sync_wait_s and exposed_comm_s of the same steps as a
cross-check of the exposed time. --json prints one JSON object instead (for
scripts). Exit status: 0, or 2 for unreadable traces or none with a
communicating backward.

Usage: /usr/bin/python3 bench/trace_overlap.py [--skip 2] [--metrics M] [--json] TRACE...
"""

import argparse
import json
import statistics
import sys
from collections import defaultdict


def die(message):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def union(intervals):
    """Sorted, disjoint union of (start, end) intervals."""
    out = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1][1] = e
        else:
            out.append([s, e])
    return out


def length(intervals):
    return sum(e - s for s, e in intervals)


def clip(intervals, lo, hi):
    return [(max(s, lo), min(e, hi)) for s, e in intervals if min(e, hi) > max(s, lo)]


def analyse_trace(path):
    """Returns (per-backward records in step order, {(step, micro): (window, collective
    union)}, {(step, collective name): end time}) of one rank's trace."""
    try:
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    except (OSError, ValueError, KeyError) as e:
        die(f"cannot read trace {path}: {e}")
    backward = defaultdict(list)  # (step, micro) -> [(start, end)]
    comm = []                     # (step, start, end, name)
    for e in events:
        if e.get("ph") != "X":
            continue
        args = e.get("args") or {}
        start, end = float(e["ts"]), float(e["ts"]) + float(e["dur"])
        if e.get("tid") == 1 and e["name"].startswith("backward"):
            backward[(int(args["step"]), int(args.get("micro", 0)))].append((start, end))
        elif e.get("tid") == 2 and e.get("cat") == "comm":
            comm.append((int(args["step"]), start, end, e["name"]))
    windows = {k: (min(s for s, _ in v), max(e for _, e in v)) for k, v in backward.items()}
    by_step = defaultdict(list)
    for (step, micro), w in windows.items():
        by_step[step].append((w[0], micro))
    owned = defaultdict(list)  # (step, micro) -> collective intervals
    for step, s, e, name in comm:
        starts = sorted(x for x in by_step.get(step, []) if x[0] <= s)
        if not starts:
            die(f"{path}: collective '{name}' of step {step} was issued before any backward "
                f"of that step; is this a scaletrain trace?")
        owned[(step, starts[-1][1])].append((s, e))
    records = []
    raw = {}
    ends = {(step, name): e for step, s, e, name in comm}
    for key in sorted(owned):
        lo, hi = windows[key]
        spans = union(owned[key])
        raw[key] = ((lo, hi), spans)
        total = length(spans)
        hidden = length(clip(spans, lo, hi))
        records.append({
            "step": key[0], "micro": key[1], "collectives": len(owned[key]),
            "backward_us": hi - lo, "comm_us": total, "hidden_us": hidden,
            "exposed_us": total - hidden,
            "share_hidden": hidden / total if total > 0 else 1.0,
        })
    return records, raw, ends


def cross_rank(traces, skip):
    """Splits the exposed time into waiting for a slower rank and the rest.

    The ranks' trace clocks have different origins; they are aligned by the
    collectives, which finish at about the same moment on every rank (the
    median difference of matching collectives' end times). Then per
    communicating backward: skew = latest minus earliest backward end over the
    ranks, and each rank's collective time is split at the latest rank's
    backward end: what ran before it was hidden behind *some* rank's backward
    (on this rank it may have been waiting for a slower peer to reach that
    layer), what ran after it is communication no backward covered.
    """
    base_ends = traces[0][2]
    offsets, spreads = [0.0], [0.0]
    for _, _, ends in traces[1:]:
        diffs = sorted(e - base_ends[k] for k, e in ends.items() if k in base_ends)
        if not diffs:
            return None
        offsets.append(statistics.median(diffs))
        q = len(diffs) // 4
        spreads.append(diffs[-1 - q] - diffs[q])
    keys = set.intersection(*(set(k for k in raw if k[0] > skip) for _, raw, _ in traces))
    if not keys:
        return None
    skews, after, hidden_bal, total = [], [], 0.0, 0.0
    for key in sorted(keys):
        ends_aligned = [raw[key][0][1] - off for (_, raw, _), off in zip(traces, offsets)]
        last = max(ends_aligned)
        skews.append(last - min(ends_aligned))
        for (_, raw, _), off in zip(traces, offsets):
            (lo, _hi), spans = raw[key]
            t = length(spans)
            h = length(clip(spans, lo, last + off))
            total += t
            hidden_bal += h
            after.append(t - h)
    return {
        "offsets_us": offsets, "alignment_iqr_us": max(spreads), "backwards": len(keys),
        "skew_ms_mean": statistics.mean(skews) / 1e3,
        "skew_ms_median": statistics.median(skews) / 1e3,
        "after_last_backward_ms_mean": statistics.mean(after) / 1e3,
        "share_hidden_behind_slowest": hidden_bal / total if total > 0 else 1.0,
    }


def summarise(records):
    if not records:
        return None
    comm = sum(r["comm_us"] for r in records)
    hidden = sum(r["hidden_us"] for r in records)
    return {
        "backwards": len(records),
        "share_hidden": hidden / comm if comm > 0 else 1.0,
        "share_hidden_median": statistics.median(r["share_hidden"] for r in records),
        "share_hidden_min": min(r["share_hidden"] for r in records),
        "backward_ms_mean": statistics.mean(r["backward_us"] for r in records) / 1e3,
        "comm_ms_mean": comm / len(records) / 1e3,
        "exposed_ms_mean": (comm - hidden) / len(records) / 1e3,
        "exposed_ms_per_step": (comm - hidden) / len({r["step"] for r in records}) / 1e3,
        "collectives_per_backward": statistics.median(r["collectives"] for r in records),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("traces", nargs="+", help="trace files, one per rank")
    ap.add_argument("--skip", type=int, default=2, help="drop steps 1..SKIP (warm-up; default 2)")
    ap.add_argument("--metrics", help="the run's metrics.jsonl (rank 0) for the cross-check")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()

    per_rank = {}
    all_records = []
    traces = [analyse_trace(path) for path in args.traces]
    for path, (records, _, _) in zip(args.traces, traces):
        recs = [r for r in records if r["step"] > args.skip]
        per_rank[path] = summarise(recs)
        all_records += recs
    overall = summarise(all_records)
    if overall is None:
        die(f"no communicating backward after step {args.skip} in {args.traces} "
            "(was the run data parallel, with --trace, and long enough?)")
    out = {"skip_steps": args.skip, "per_rank": per_rank, "all": overall}
    if len(traces) > 1:
        out["cross_rank"] = cross_rank(traces, args.skip)

    if args.metrics:
        try:
            with open(args.metrics) as f:
                rows = [json.loads(l) for l in f if l.strip()]
        except (OSError, ValueError) as e:
            die(f"cannot read metrics {args.metrics}: {e}")
        rows = [r for r in rows if r.get("step", 0) > args.skip]
        if rows:
            out["metrics_rank0"] = {
                "steps": len(rows),
                "backward_s_mean": statistics.mean(r["backward_s"] for r in rows),
                "grad_sync_wait_s_mean": statistics.mean(r["grad_sync_wait_s"] for r in rows),
                "exposed_comm_s_mean": statistics.mean(r["exposed_comm_s"] for r in rows),
                "step_time_s_median": statistics.median(r["step_time_s"] for r in rows),
                "tokens_per_s_median": statistics.median(r["tokens_per_s"] for r in rows),
            }

    if args.json:
        print(json.dumps(out))
        return
    print(f"communication hidden behind backward (steps after {args.skip}; per backward: "
          "union of collective spans inside [first backward start, last backward end] / union)")
    hdr = ("rank trace", "backwards", "hidden", "median", "min", "backward ms", "comm ms",
           "exposed ms", "colls")
    print("| %-28s | %9s | %7s | %7s | %7s | %11s | %8s | %10s | %5s |" % hdr)
    print("|" + "|".join("-" * (w + 2) for w in (28, 9, 7, 7, 7, 11, 8, 10, 5)) + "|")
    for name, s in list(per_rank.items()) + [("all ranks", overall)]:
        if s is None:
            print("| %-28s | %9s |" % (name[-28:], "none"))
            continue
        print("| %-28s | %9d | %6.1f%% | %6.1f%% | %6.1f%% | %11.1f | %8.1f | %10.1f | %5g |" % (
            name[-28:], s["backwards"], 100 * s["share_hidden"], 100 * s["share_hidden_median"],
            100 * s["share_hidden_min"], s["backward_ms_mean"], s["comm_ms_mean"],
            s["exposed_ms_mean"], s["collectives_per_backward"]))
    x = out.get("cross_rank")
    if x:
        print(f"where the exposed time goes (ranks' clocks aligned on collective end times, "
              f"IQR {x['alignment_iqr_us'] / 1e3:.2f} ms): backward ends differ between ranks by "
              f"{x['skew_ms_mean']:.1f} ms on average (median {x['skew_ms_median']:.1f}); "
              f"collective time after the slowest rank's backward ended: "
              f"{x['after_last_backward_ms_mean']:.1f} ms per rank and backward; "
              f"share hidden behind the slowest rank's backward: "
              f"{100 * x['share_hidden_behind_slowest']:.1f}%")
    m = out.get("metrics_rank0")
    r0 = per_rank[args.traces[0]]
    if m and r0:
        print(f"cross-check, rank 0's metrics.jsonl over the same {m['steps']} steps: "
              f"grad_sync_wait_s mean {m['grad_sync_wait_s_mean'] * 1e3:.1f} ms, "
              f"exposed_comm_s mean {m['exposed_comm_s_mean'] * 1e3:.1f} ms "
              f"per step (trace, {args.traces[0]}: exposed {r0['exposed_ms_per_step']:.1f} ms "
              f"per step); backward_s mean {m['backward_s_mean'] * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
