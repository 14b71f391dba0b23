"""The Python package against the command it wraps (run by test_python_api.sh in
a virtualenv with the wheel installed, from outside the checkout).

Usage: python_api_check.py SCALETRAIN REPO_ROOT RUN_DIR with-pandas|without-pandas

Each planner call must equal what `scaletrain plan ... --json` prints for the
same inputs, typed on the command line as a user would (the keywords are
written out separately, so their spelling as flags is checked too); each
error must be the command's message. Exits non-zero on the first mismatch.
"""

import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import scaletrain

BIN, ROOT, RUN, MODE = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4]
checks = 0


def check(ok, what):
    global checks
    if not ok:
        sys.exit(f"FAIL: {what}")
    checks += 1


def cli(*args):
    """`scaletrain plan ARGS`, run from the checkout (its ./configs): (rc, stdout, stderr)."""
    p = subprocess.run([BIN, "plan", *args], cwd=ROOT, capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def cli_json(*args):
    rc, out, err = cli(*args, "--json")
    check(rc == 0, f"scaletrain plan {' '.join(args)} failed: {err}")
    return json.loads(out)


def cli_error(*args):
    """The command's one error line, without 'error: '."""
    rc, _, err = cli(*args)
    check(rc != 0 and err.startswith("error: "), f"scaletrain plan {' '.join(args)} did not fail: {err}")
    return err.strip()[len("error: "):]


def raises(exc_type, fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except exc_type as e:
        return str(e)
    sys.exit(f"FAIL: {fn.__name__}{args} {kwargs} raised no {exc_type.__name__}")


def same(api, ref, what):
    check(api == ref, f"{what}: the API's result differs from the command's JSON")


# The release: the repository's VERSION file, which CMake's project() reads too.
check(scaletrain.__version__ == (ROOT / "VERSION").read_text().strip(), f"__version__ {scaletrain.__version__}")

# plan(): one layout, keyword by keyword as the flags.
tc = str(ROOT / "configs/shakespeare_char.toml")
plans = [
    (dict(model="llama2-70b", cluster="dgx-h100", gpus=1024, tp=8, pp=4, micro_batch=1),
     ["--model", "llama2-70b", "--cluster", "dgx-h100", "--gpus", "1024", "--tp", "8", "--pp", "4",
      "--micro-batch", "1"]),
    (dict(model="gpt3-175b", cluster="dgx-a100", gpus=1536, tp=8, pp=16, vpp=3, schedule="interleaved",
          sp=True, recompute="selective", global_batch=1536, zero=1),
     ["--model", "gpt3-175b", "--cluster", "dgx-a100", "--gpus", "1536", "--tp", "8", "--pp", "16",
      "--vpp", "3", "--schedule", "interleaved", "--sp", "--recompute", "selective",
      "--global-batch", "1536", "--zero", "1"]),
    (dict(model="llama2-7b", cluster="aws-p4de", gpus=128, seq=4096, micro_batch=2, global_batch=256,
          stack="pytorch-fsdp1", zero=3, shard_group=8),
     ["--model", "llama2-7b", "--cluster", "aws-p4de", "--gpus", "128", "--seq", "4096",
      "--micro-batch", "2", "--global-batch", "256", "--stack", "pytorch-fsdp1", "--zero", "3",
      "--shard-group", "8"]),
    # Floats travel as their shortest exact form; sp=False leaves the flag out.
    (dict(model="llama3-8b", cluster="dgx-h100", gpus=64, power_cap=500.0, kernel_uncertainty=0.05,
          bucket_mb=12.5, tokens=1.5e12, sp=False),
     ["--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "64", "--power-cap", "500",
      "--kernel-uncertainty", "0.05", "--bucket-mb", "12.5", "--tokens", "1.5e12"]),
    # A training config with a repeated flag (--set) and its vocabulary.
    (dict(train_config=tc, cluster="dgx-a100", vocab=65, set=["parallel.dp=2", "training.micro_batch_size=4"]),
     ["--train-config", tc, "--cluster", "dgx-a100", "--vocab", "65", "--set", "parallel.dp=2",
      "--set", "training.micro_batch_size=4"]),
]
for kwargs, args in plans:
    same(scaletrain.plan(**kwargs), cli_json(*args), f"plan({kwargs})")
p = scaletrain.plan("llama2-70b", "dgx-h100", 1024, tp=8, pp=4)
check(p["schema"] == "scaletrain.plan/1" and p["layout"]["dp"] == 32, f"plan document {p.get('schema')}")

# search(): the command's `top`, the fastest fitting layouts.
top = scaletrain.search("gpt3-175b", "dgx-a100", 1024, top=3)
ref = cli_json("--model", "gpt3-175b", "--cluster", "dgx-a100", "--gpus", "1024", "--search", "--top", "3")
same(top, ref["top"], "search(gpt3-175b, dgx-a100, 1024, top=3)")
check(len(top) == 3 and top[0]["step_time_s"] <= top[1]["step_time_s"], "search's top 3, fastest first")
held = scaletrain.search("llama2-13b", "dgx-h100", 256, tp=4, zero=1, top=2)
same(held, cli_json("--model", "llama2-13b", "--cluster", "dgx-h100", "--gpus", "256", "--tp", "4",
                    "--zero", "1", "--search", "--top", "2")["top"], "search with tp and zero held")
check(all(h["layout"]["tp"] == 4 for h in held), "search held tp=4")
same(scaletrain.plan("gpt3-175b", "dgx-a100", 1024, search=True, top=3), ref, "plan(search=True)")

# sweep(): the command's `points`.
points = scaletrain.sweep("llama2-7b", "dgx-a100", [8, 16, 32, 64], micro_batch=2)
same(points, cli_json("--model", "llama2-7b", "--cluster", "dgx-a100", "--sweep", "8,16,32,64",
                      "--micro-batch", "2")["points"], "sweep(llama2-7b, [8..64])")
check([pt["gpus"] for pt in points] == [8, 16, 32, 64], "sweep's GPU counts")

# validate(): a published-runs file of tests/plan, and with a stack for rows without one.
csv = ROOT / "tests/plan/torchtitan-2024.csv"
v = scaletrain.validate(csv)
same(v, cli_json("validate", str(csv)), "validate(torchtitan-2024.csv)")
check(v["rows"] and "mape" in v, "validate's rows")
csv2 = ROOT / "tests/plan/korthikanti-2022.csv"
same(scaletrain.validate(str(csv2), stack="legacy"), cli_json("validate", str(csv2), "--stack", "legacy"),
     "validate(korthikanti-2022.csv, stack=legacy)")

# The catalogs: the names the command lists when a name is wrong.
def known_list(message):
    """The names after "known: " (or "known clusters: "), before any " (" remark."""
    names = re.split(r"known(?: clusters)?: ", message)[-1]
    return names.split(" (")[0].split(", ")


models_known = known_list(cli_error("--model", "no-such-model", "--cluster", "dgx-h100", "--gpus", "8"))
check(scaletrain.models() == models_known, f"models() {scaletrain.models()} != {models_known}")
clusters_known = known_list(cli_error("--model", "gpt2-124m"))
check(scaletrain.clusters() == clusters_known, f"clusters() {scaletrain.clusters()} != {clusters_known}")
stack_err = cli_error("--model", "gpt2-124m", "--cluster", "dgx-h100", "--gpus", "8", "--stack", "no-such-stack")
check(all(s in stack_err for s in scaletrain.stacks()) and len(scaletrain.stacks()) >= 8,
      f"stacks() {scaletrain.stacks()} against: {stack_err}")
for s in scaletrain.stacks():
    check(scaletrain.plan("gpt2-124m", "dgx-h100", 8, stack=s)["software"] == s, f"stack {s} plans as itself")
def cluster_gpu(c):
    """The GPU a cluster plans on (fp16 where the part has no bf16 rate, as V100s)."""
    try:
        return scaletrain.plan("gpt2-124m", c, 8)["cluster"]["gpu"]
    except ValueError as e:
        if "no bf16 matrix rate" not in str(e):
            raise
        return scaletrain.plan("gpt2-124m", c, 8, precision="fp16")["cluster"]["gpu"]


gpu_of_clusters = {cluster_gpu(c) for c in scaletrain.clusters()}
check(gpu_of_clusters <= set(scaletrain.gpus()), f"the clusters' GPUs {gpu_of_clusters} not in gpus()")

# Errors: the command's message, as ValueError; a misspelt model names the nearest.
msg = raises(ValueError, scaletrain.plan, "llama2-70", "dgx-h100", 64)
check(msg == cli_error("--model", "llama2-70", "--cluster", "dgx-h100", "--gpus", "64"), f"model error: {msg}")
check("did you mean 'llama2-70b'?" in msg, f"no suggestion in: {msg}")
msg = raises(ValueError, scaletrain.plan, "llama2-70b", "dgx-h100", 64, tp=3)
check(msg == cli_error("--model", "llama2-70b", "--cluster", "dgx-h100", "--gpus", "64", "--tp", "3"),
      f"layout error: {msg}")
msg = raises(ValueError, scaletrain.plan, "llama2-70b", "dgx-h10", 64)
check("did you mean 'dgx-h100'?" in msg, f"cluster error: {msg}")
msg = raises(ValueError, scaletrain.plan, "llama2-70b", "dgx-h100", "many")
check("--gpus" in msg, f"a value the flag's parser refuses: {msg}")
msg = raises(ValueError, scaletrain.validate, "/no/such/runs.csv")
check(msg == cli_error("validate", "/no/such/runs.csv"), f"validate error: {msg}")
msg = raises(TypeError, scaletrain.plan, "llama2-70b", "dgx-h100", 64, tpp=8)
check("'tpp'; did you mean 'tp'?" in msg, f"keyword error: {msg}")

# The typed keywords (PlanFlags) are the command's flags, no more, no fewer.
flags = {f.replace("-", "_") for f in scaletrain._core.plan_flags(False)}
typed = set(scaletrain.PlanFlags.__annotations__) | {"model", "cluster", "gpus", "search", "sweep", "json"}
check(flags == typed, f"PlanFlags differs from the flags: {sorted(flags ^ typed)}")

# read_run(): a copy of the stopped run with what a run directory may hold
# beside clean records: a line cut short (a writer at work), a step recorded
# again (the later record wins), a straggler flagged.
with tempfile.TemporaryDirectory() as tmp:
    run = Path(tmp) / "run"
    shutil.copytree(RUN, run)
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [r["step"] for r in lines]
    check(len(steps) >= 4 and steps == list(range(1, len(steps) + 1)), f"the run's steps {steps}")
    again = dict(lines[1], loss=123.5)
    slow = dict(lines[2], stragglers=[{"rank": 0, "host": "h", "phase": "forward", "seconds": 0.2,
                                       "median_s": 0.1, "compute_ratio": 2.0, "windows": 3}])
    with open(run / "metrics.jsonl", "a") as f:
        f.write(json.dumps(again) + "\n" + json.dumps(slow) + "\n" + json.dumps(lines[0])[:25])
    ranks_lines = [json.loads(x) for x in (run / "ranks.jsonl").read_text().splitlines()]
    flight = json.loads((run / "flight/rank-0.json").read_text())

    r = scaletrain.read_run(run)
    rows = r.metrics.to_dict("records") if MODE == "with-pandas" else r.metrics
    if MODE == "with-pandas":
        import pandas
        check(all(isinstance(t, pandas.DataFrame) for t in (r.metrics, r.ranks, r.events)), "DataFrames")
    else:
        check(all(isinstance(t, list) for t in (r.metrics, r.ranks, r.events)), "lists without pandas")
    check([x["step"] for x in rows] == steps, f"read_run's steps {[x['step'] for x in rows]} != {steps}")
    want_loss = [123.5 if s == 2 else lines[s - 1]["loss"] for s in steps]
    check([x["loss"] for x in rows] == want_loss, "read_run's losses (step 2 recorded again)")
    ranks = r.ranks.to_dict("records") if MODE == "with-pandas" else r.ranks
    check(len(ranks) == len(ranks_lines) >= 2, f"ranks rows {len(ranks)}, file {len(ranks_lines)}")
    check([x["forward_s"] for x in ranks] == [x["phases"]["forward_s"] for x in ranks_lines],
          "ranks' phases as columns")
    events = r.events.to_dict("records") if MODE == "with-pandas" else r.events
    stragglers = [e for e in events if e["event"] == "straggler"]
    check(len(stragglers) == 1 and stragglers[0]["step"] == 3 and stragglers[0]["phase"] == "forward",
          f"straggler events {stragglers}")
    ops = [e for e in events if e["event"] == "flight"]
    check(len(ops) == len(flight["records"]) and all(e["reason"] == "SIGTERM" for e in ops),
          f"flight events: {len(ops)} of {len(flight['records'])}")
    check(r.memory == json.loads((run / "memory.json").read_text()), "memory.json")
    check(r.config is None or r.config["training"]["steps"] == 100000, "config.resolved.toml")
    if MODE == "with-pandas":
        import pandas
        table = pandas.read_csv(csv)
        same(scaletrain.validate(table), v, "validate(DataFrame of torchtitan-2024.csv)")

    (run / "flight/rank-1.json").write_text('{"rank": 1, "records": [')
    msg = raises(ValueError, scaletrain.read_run, run)
    check("rank-1.json is not a flight record" in msg, f"damaged flight record: {msg}")

    # A missing or empty directory: the path and the fix.
    msg = raises(FileNotFoundError, scaletrain.read_run, Path(tmp) / "nowhere")
    check("nowhere" in msg and "--run-dir" in msg, f"missing run dir: {msg}")
    (Path(tmp) / "empty").mkdir()
    msg = raises(ValueError, scaletrain.read_run, Path(tmp) / "empty")
    check("empty' is not a run directory" in msg and "--run-dir" in msg, f"empty run dir: {msg}")

print(f"python_api_check ({MODE}, scaletrain {scaletrain.__version__}): {checks} checks passed")
