#!/usr/bin/env python3
"""The planner against measured scaling on an emulated cluster (issue 17).

For each link rate, host count and layout family it brings up the emulated
cluster (scripts/cluster.sh), measures it with `scaletrain bench` under the
run's own launch (every rank at once: the profile's per-rank compute rate is
the oversubscribed one the run will see), asks `scaletrain plan
--train-config` for the step time from that profile alone, trains a few steps
and compares. Writes JSON: rows [{layout, hosts, rate_mbit, measured_step_s,
predicted_step_s, ...}] and the MAPE. Called by bench/cluster_scaling.sh,
which checks root and builds; docs/scaling.md explains the method.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLUSTER = os.path.join(ROOT, "scripts", "cluster.sh")
CONFIG = os.path.join(ROOT, "configs", "shakespeare_char.toml")
MICRO_BATCH = 16
SEQS_PER_DP_RANK = 32  # DP families keep each rank's batch: 2 micro-batches of 16


def family_layout(family, hosts):
    """(tp, pp, dp) of a layout family at `hosts` hosts: TP stays inside a
    host (2 ranks), DP and PP go across hosts; "tpx" is TP across the hosts
    (one rank each), for the latency experiment."""
    if family == "dp":
        return 1, 1, hosts
    if family == "tp":
        return 2, 1, hosts
    if family == "tpx":
        return hosts, 1, 1
    if family == "pp":
        return 1, hosts, 1
    if family == "3d":  # tp 2 in a host; pp 2 across hosts once there are 2; dp takes the rest
        pp = min(2, hosts)
        return 2, pp, hosts // pp
    raise ValueError(family)


def run(cmd, log, timeout):
    with open(log, "w") as f:
        p = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=timeout)
    if p.returncode != 0:
        tail = open(log).read()[-1500:]
        raise RuntimeError("%s failed (exit %d):\n%s" % (" ".join(cmd[:6]), p.returncode, tail))


class Bench:
    def __init__(self, args):
        self.a = args
        self.bin = os.path.join(args.build, "scaletrain")
        data = os.path.join(args.build, "data", "shakespeare_char")
        self.sets = ["--set", 'data.train="%s/train.bin"' % data, "--set", 'data.val="%s/val.bin"' % data,
                     "--set", "training.threads=1", "--set", 'parallel.dp_reduce="flat"']
        self.work = args.work
        self.cluster_dir = os.path.join(self.work, "cluster")
        self.env = dict(os.environ, ST_CLUSTER_DIR=self.cluster_dir, OMPI_ALLOW_RUN_AS_ROOT="1",
                        OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1")
        os.environ.update(self.env)
        self.up = None  # (hosts, slots, rate, delay) of the cluster now up
        self.profiles = {}
        self.delay = 0  # one-way ms added between hosts (VDE links); 0: the kernel's veth links

    def cluster(self, hosts, slots, rate):
        key = (hosts, slots, rate, self.delay)
        if self.up == key:
            return
        cmd = [CLUSTER, "up", str(hosts), "--slots", str(slots), "--force"]
        if rate:
            cmd += ["--rate", "%dmbit" % rate]
        if self.delay:
            cmd += ["--delay", str(self.delay)]
        run(cmd, os.path.join(self.work, "cluster.log"), 120)
        self.up = key

    def mpirun(self, ranks):
        args = open(os.path.join(self.cluster_dir, "mpirun.args")).read().split()
        return ["mpirun"] + args + ["-np", str(ranks)]

    def layout_sets(self, tp, pp, dp, extra, global_batch=None):
        gb = global_batch or SEQS_PER_DP_RANK * dp
        return ["--set", "parallel.tp=%d" % tp, "--set", "parallel.pp=%d" % pp, "--set", "parallel.dp=%d" % dp,
                "--set", "training.global_batch_size=%d" % gb,
                "--set", "training.micro_batch_size=%d" % MICRO_BATCH] + extra

    def profile(self, hosts, slots, rate):
        key = (hosts, slots, rate, self.delay)
        if key not in self.profiles:
            path = os.path.join(self.work, "hw-%d-%d-%d-%d.toml" % key)
            run(self.mpirun(hosts * slots) + [self.bin, "bench", "--output", path, "--name", "emu", "--threads", "1",
                                              "--config", CONFIG, "--min-seconds", str(self.a.bench_seconds),
                                              "--max-allreduce-mb", "8"] + self.sets[:4],
                os.path.join(self.work, "bench.log"), 300)
            self.profiles[key] = path
        return self.profiles[key]

    def predict(self, profile, lsets):
        out = subprocess.run([self.bin, "plan", "--train-config", CONFIG, "--hardware", profile, "--cluster", "emu",
                              "--json"] + self.sets + lsets, capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            raise RuntimeError("plan failed: " + out.stderr)
        return json.loads(out.stdout)

    def measure(self, ranks, lsets, steps=None):
        rd = os.path.join(self.work, "run")
        subprocess.run(["rm", "-rf", rd])
        run(self.mpirun(ranks) + [self.bin, "train", "--config", CONFIG, "--quiet", "--run-dir", rd,
                                  "--set", "training.steps=%d" % (steps or self.a.steps),
                                  "--set", "training.eval_interval=0",
                                  "--set", "training.eval_steps=1", "--set", "training.sample_tokens=0",
                                  "--set", "checkpoint.interval=0"] + self.sets + lsets,
            os.path.join(self.work, "train.log"), 600)
        recs = [json.loads(l) for l in open(os.path.join(rd, "metrics.jsonl"))][2:]  # warm-up steps dropped
        med = lambda k: statistics.median(r.get(k, 0.0) for r in recs)
        return {"step_s": med("step_time_s"), "tokens_per_s": med("tokens_per_s"),
                "last_loss": recs[-1]["loss"], "dp_bytes": recs[-1].get("comm_bytes", {}).get("dp", 0),
                "forward_s": med("forward_s"), "backward_s": med("backward_s"),
                "optimizer_s": med("optimizer_s"), "exposed_comm_s": med("exposed_comm_s")}

    def row(self, family, hosts, rate, extra=(), name=None, global_batch=None, slots=None):
        tp, pp, dp = family_layout(family, hosts * (slots or 1) if family == "dp" else hosts)
        ranks = tp * pp * dp
        slots = ranks // hosts
        self.cluster(hosts, slots, rate)
        lsets = self.layout_sets(tp, pp, dp, list(extra), global_batch)
        plan = self.predict(self.profile(hosts, slots, rate), lsets)
        m = self.measure(ranks, lsets)
        pred = plan["step_time_s"]
        r = {"layout": name or family, "tp": tp, "pp": pp, "dp": dp, "hosts": hosts, "ranks": ranks,
             "rate_mbit": rate, "delay_ms": self.delay, "measured_step_s": round(m["step_s"], 5), "predicted_step_s": round(pred, 5),
             "error_pct": round(100 * (pred - m["step_s"]) / m["step_s"], 2),
             "tokens_per_s": round(m["tokens_per_s"], 1),
             "measured_breakdown_s": {k: round(v, 5) for k, v in m.items() if k.endswith("_s") and k != "step_s"},
             "predicted_breakdown_s": {k: round(v, 5) for k, v in plan["time_breakdown_s"].items()},
             "predicted_limiter": plan.get("limiter", "")}
        print("%-6s hosts %d ranks %d rate %5s delay %d ms: measured %.4f s, predicted %.4f s (%+.1f%%)" % (
            r["layout"], hosts, ranks, rate or "-", self.delay, m["step_s"], pred, r["error_pct"]), flush=True)
        return r


def compression(b, rate, steps):
    """DP over 2 hosts at `rate`: each parallel.dp_compress method's step time,
    DP bytes per step and loss after `steps` steps (docs/benchmarks.md)."""
    rows = []
    b.cluster(2, 1, rate)
    prof = b.profile(2, 1, rate)
    for c in ("none", "bf16", "fp16", "sign"):
        lsets = b.layout_sets(1, 1, 2, ["--set", 'parallel.dp_compress="%s"' % c])
        pred = b.predict(prof, lsets)["step_time_s"]
        m = b.measure(2, lsets, steps)
        rows.append({"method": c, "hosts": 2, "rate_mbit": rate, "steps": steps, "measured_step_s": round(m["step_s"], 4),
                     "predicted_step_s": round(pred, 4), "dp_bytes_per_step": m["dp_bytes"],
                     "exposed_comm_s": round(m["exposed_comm_s"], 4), "loss": round(m["last_loss"], 4)})
        print("%-5s step %.4f s (predicted %.4f), DP %d B/step, loss after %d steps %.4f" % (
            c, m["step_s"], pred, m["dp_bytes"], steps, m["last_loss"]), flush=True)
    return rows


def barely(b, rate):
    """"More GPUs barely help": data parallelism over 1, 2 and 4 hosts at
    `rate` with the global batch fixed (64 sequences), then at 4 hosts what
    recovers it: compression, a bigger batch per step (accumulation), and on
    2 hosts x 2 ranks the hierarchical reduce against the flat one."""
    rows = [b.row("dp", h, rate if h > 1 else 0, name="dp-fixed-batch", global_batch=64) for h in (1, 2, 4)]
    rem = [b.row("dp", 4, rate, ["--set", 'parallel.dp_compress="bf16"'], "4 hosts, bf16", global_batch=64),
           b.row("dp", 4, rate, ["--set", 'parallel.dp_compress="sign"'], "4 hosts, sign", global_batch=64),
           b.row("dp", 4, rate, [], "4 hosts, 4x batch (accumulation)", global_batch=256),
           b.row("dp", 2, rate, [], "2 hosts x 2 ranks, flat", global_batch=64, slots=2),
           b.row("dp", 2, rate, ["--set", 'parallel.dp_reduce="hierarchical"'], "2 hosts x 2 ranks, hierarchical",
                 global_batch=64, slots=2)]
    return rows, rem


def shifted_profile(path, extra_us, out):
    """A copy of profile PATH with the fabric's one-way latency raised by
    EXTRA_US: what the planner predicts for a delay the links cannot add."""
    text = open(path).read()
    shifted, n = re.subn(r"^latency_us = ([0-9.eE+-]+)",
                         lambda m: "latency_us = %.6g" % (float(m.group(1)) + extra_us), text, flags=re.M)
    if n != 1:
        raise RuntimeError("%s: expected one fabric latency_us line, found %d" % (path, n))
    open(out, "w").write(shifted)
    return out


def latency(b, delays, families=("dp", "pp", "tpx")):
    """The seeds' claim ("a delay of just 0.2 milliseconds between GPUs can
    add up"), measured: DP, PP and TP across 2 hosts at each added one-way
    delay (0: the kernel's veth links; N: VDE links delaying N ms), each
    predicted from the profile of that very cluster; and, since wirefilter
    adds whole milliseconds only, 0.2 ms predicted from the undelayed
    cluster's profile with its latency raised by 0.2 ms."""
    rows = []
    for d in delays:
        b.delay = d
        for fam in families:
            rows.append(b.row(fam, 2, 0))
    b.delay = 0
    base = b.profile(2, 1, 0)
    shifted = shifted_profile(base, 200.0, os.path.join(b.work, "hw-shifted.toml"))
    extra = []
    for fam in families:
        tp, pp, dp = family_layout(fam, 2)
        lsets = b.layout_sets(tp, pp, dp, [])
        at0 = b.predict(base, lsets)["step_time_s"]
        at = b.predict(shifted, lsets)["step_time_s"]
        extra.append({"layout": fam, "delay_ms": 0.2, "predicted_step_s": round(at, 5),
                      "predicted_at_0_s": round(at0, 5), "predicted_slowdown_pct": round(100 * (at / at0 - 1), 2)})
        print("%-6s predicted at +0.2 ms: %.4f s (%+.1f%% over no delay)" % (fam, at, 100 * (at / at0 - 1)), flush=True)
    return rows, extra


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--json", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--families", default="")
    ap.add_argument("--rates", default="")
    ap.add_argument("--hosts", default="1,2,4")
    ap.add_argument("--barely", action="store_true",
                    help="instead: DP at a fixed batch over 1, 2, 4 hosts at the first rate, and remedies")
    ap.add_argument("--compression", type=int, default=0, metavar="STEPS",
                    help="instead: each gradient compression over 2 hosts at the first rate, STEPS steps")
    ap.add_argument("--delays", default="",
                    help="one-way delays between hosts to run at, ms (0: the kernel's links; default 0, "
                         "full run 0,1)")
    ap.add_argument("--latency", action="store_true",
                    help="instead: DP, PP and TP across 2 hosts at each --delays (default 0,1,2,5), and "
                         "0.2 ms predicted")
    a = ap.parse_args()
    a.steps = 7 if a.quick else 12
    a.bench_seconds = 0.1 if a.quick else 0.3
    families = (a.families or ("dp,pp,3d" if a.quick else "dp,tp,pp,3d")).split(",")
    rates = [int(x) for x in (a.rates or ("1000,100" if a.quick else "0,1000,100")).split(",")]
    hosts = [int(x) for x in a.hosts.split(",")]
    default_delays = "0,1,2,5" if a.latency else ("0" if a.quick else "0,1")
    delays = [int(x) for x in (a.delays or default_delays).split(",")]
    b = Bench(a)
    start = time.time()
    if a.latency:
        try:
            rows, extra = latency(b, delays)
        finally:
            subprocess.run([CLUSTER, "down"], env=b.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        errs = [abs(r["error_pct"]) for r in rows]
        json.dump({"schema": "scaletrain.latency.v1", "machine": os.uname().nodename, "rows": rows,
                   "predicted_only": extra, "mape": round(statistics.mean(errs), 2),
                   "max_abs_error_pct": round(max(errs), 2)}, open(a.json, "w"), indent=1)
        print("%d rows: MAPE %.1f%%, worst %.1f%%" % (len(rows), statistics.mean(errs), max(errs)))
        return 0
    if a.compression:
        try:
            rows = compression(b, rates[0], a.compression)
        finally:
            subprocess.run([CLUSTER, "down"], env=b.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        json.dump({"schema": "scaletrain.dp_compression.v1", "machine": os.uname().nodename, "rows": rows},
                  open(a.json, "w"), indent=1)
        return 0
    if a.barely:
        try:
            rows, rem = barely(b, rates[0])
        finally:
            subprocess.run([CLUSTER, "down"], env=b.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        json.dump({"schema": "scaletrain.barely.v1", "machine": os.uname().nodename, "rows": rows, "remedies": rem},
                  open(a.json, "w"), indent=1)
        return 0
    rows = []
    try:
        for delay in delays:
            for rate in rates:
                for h in hosts:
                    if h == 1 and (rate != rates[0] or delay != delays[0]):
                        continue  # one host: no link to limit or delay; measured once
                    b.delay = delay if h > 1 else 0
                    for fam in families:
                        rows.append(b.row(fam, h, rate if h > 1 else 0))
    finally:
        subprocess.run([CLUSTER, "down"], env=b.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # Scaling efficiency: tokens/s per rank against the same family on one host.
    one = {r["layout"]: r for r in rows if r["hosts"] == 1}
    for r in rows:
        base = one.get(r["layout"])
        if base:
            r["scaling_efficiency"] = round(r["tokens_per_s"] / r["ranks"] / (base["tokens_per_s"] / base["ranks"]), 3)
    errs = [abs(r["error_pct"]) for r in rows]
    out = {"schema": "scaletrain.cluster_scaling.v1", "quick": a.quick, "machine": os.uname().nodename,
           "cores": os.cpu_count(), "seconds": round(time.time() - start, 1), "rows": rows,
           "mape": round(statistics.mean(errs), 2), "max_abs_error_pct": round(max(errs), 2)}
    json.dump(out, open(a.json, "w"), indent=1)
    print("%d rows in %.0f s: MAPE %.1f%%, worst %.1f%%" % (len(rows), out["seconds"], out["mape"],
                                                             out["max_abs_error_pct"]))


if __name__ == "__main__":
    sys.exit(main())
