"""Reads a run's TensorBoard event files (RUN/tb) with the `tensorboard`
package's own reader and checks every scalar against metrics.jsonl.

Usage: tb_check.py RUN_DIR           exit 0 when every check holds
       tb_check.py --corrupt FILE    flips a byte of a record's payload and
                                     exits 0 when TensorBoard's record reader
                                     then reports data loss (the CRCs are checked)
"""
import glob
import json
import math
import os
import struct
import sys

from tensorboard.backend.event_processing import event_accumulator
from tensorboard.backend.event_processing import event_file_loader
from tensorboard.compat.tensorflow_stub import errors
from tensorboard.compat.tensorflow_stub import pywrap_tensorflow

# metrics.jsonl key -> TensorBoard tag
TAGS = {
    "loss": "train/loss", "lr": "train/lr", "grad_norm": "train/grad_norm",
    "step_time_s": "perf/step_time_s", "tokens_per_s": "perf/tokens_per_s",
    "data_s": "time/data_s", "forward_s": "time/forward_s", "backward_s": "time/backward_s",
    "grad_sync_wait_s": "time/grad_sync_wait_s", "exposed_comm_s": "time/exposed_comm_s",
    "optimizer_s": "time/optimizer_s", "tp_comm_wait_s": "time/tp_comm_wait_s",
    "cp_comm_wait_s": "time/cp_comm_wait_s",
    "pipeline_wait_s": "time/pipeline_wait_s", "val_loss": "val/loss",
}


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def read_raw(path):
    """Every record through TensorBoard's TFRecord reader (it checks both CRCs)."""
    reader = pywrap_tensorflow.PyRecordReader_New(path)
    n = 0
    while True:
        try:
            reader.GetNext()
        except errors.OutOfRangeError:
            return n
        n += 1


def scalars(run):
    files = sorted(glob.glob(os.path.join(run, "tb", "events.out.tfevents.*")))
    if not files:
        sys.exit("no event file in %s/tb" % run)
    found = {}
    versions = 0
    for path in files:
        read_raw(path)
        for event in event_file_loader.LegacyEventFileLoader(path).Load():
            if event.HasField("file_version"):
                versions += 1
                if event.file_version != "brain.Event:2":
                    sys.exit("file version %r" % event.file_version)
                continue
            for v in event.summary.value:
                found[(v.tag, event.step)] = v.simple_value
    if versions != len(files):
        sys.exit("%d files, %d file-version records" % (len(files), versions))
    return found


def main():
    if sys.argv[1] == "--corrupt":
        path = sys.argv[2]
        data = bytearray(open(path, "rb").read())
        first_len = struct.unpack("<Q", data[:8])[0]
        data[12 + first_len + 4 + 16 + 8] ^= 0x40  # inside the second record's payload
        open(path, "wb").write(bytes(data))
        try:
            read_raw(path)
        except errors.DataLossError as e:
            print("ok: corrupted record refused: %s" % e)
            return
        sys.exit("a corrupted record was read without a data-loss error")
    run = sys.argv[1]
    found = scalars(run)
    records = [json.loads(line) for line in open(os.path.join(run, "metrics.jsonl"))]
    checked = 0
    for rec in records:
        for key, tag in TAGS.items():
            if key not in rec:
                continue
            got = found.get((tag, rec["step"]))
            if got is None:
                sys.exit("step %d: no %s" % (rec["step"], tag))
            if not math.isclose(got, f32(rec[key]), rel_tol=1e-6, abs_tol=1e-30):
                sys.exit("step %d: %s is %r, metrics.jsonl has %r" % (rec["step"], tag, got, rec[key]))
            checked += 1
        for group, nbytes in rec.get("comm_bytes", {}).items():
            got = found.get(("comm/%s_bytes" % group, rec["step"]))
            if got is None or got != f32(nbytes):
                sys.exit("step %d: comm/%s_bytes is %r, metrics.jsonl has %r" % (rec["step"], group, got, nbytes))
            checked += 1
    memory = json.load(open(os.path.join(run, "memory.json")))["per_rank"]
    for key, value in memory.items():
        if found.get(("memory/" + key, 0)) != f32(value):
            sys.exit("memory/%s at step 0 is %r, memory.json has %r" % (key, found.get(("memory/" + key, 0)), value))
        checked += 1
    steps = sorted({step for (tag, step) in found if tag == "train/loss"})
    if steps != [r["step"] for r in records]:
        sys.exit("train/loss steps %s, metrics.jsonl steps %s" % (steps, [r["step"] for r in records]))
    if ("perf/model_tflops_per_rank", records[-1]["step"]) not in found:
        sys.exit("no perf/model_tflops_per_rank")
    # What the TensorBoard UI loads (its accumulator, over the folder).
    acc = event_accumulator.EventAccumulator(os.path.join(run, "tb"))
    acc.Reload()
    shown = [(e.step, e.value) for e in acc.Scalars("train/loss")]
    if shown != [(r["step"], f32(r["loss"])) for r in records]:
        sys.exit("TensorBoard's accumulator shows train/loss %s" % shown)
    print("ok: %d scalars equal metrics.jsonl and memory.json" % checked)


main()
