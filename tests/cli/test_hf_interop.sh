#!/usr/bin/env bash
# `scaletrain export --format hf` and `scaletrain import` (src/checkpoint/hf_interop.h)
# from the command line: a checkpoint written by a tp 2 x pp 2 run exports
# with Hugging Face's names and layout (checked against tests/cli/checkpoint_io.py,
# an independent reader of our checkpoints); it imports back and samples the
# same greedy text; training.init_from fine-tunes the import from step 0; bad
# inputs end with one error line naming the cause, and write nothing.
# (The logits against the `transformers` library: tests/unit/test_hf_interop.cpp.)
# Usage: test_hf_interop.sh PATH/TO/scaletrain REPO_ROOT
. "$(dirname "$0")/lib.sh"
st_cli_init "$@"
$py -c "import numpy" 2>/dev/null || { echo "SKIP: numpy not found (apt-get install python3-numpy)"; exit 0; }

st_small_data 20000
st_tiny_train_args
tiny+=(--set training.steps=30)
# The checkpoint: tensor x pipeline parallel where mpirun is, else one rank.
if command -v mpirun >/dev/null; then
  launch=(timeout 120 mpirun -np 4 "$bin")
  layout=(--set parallel.tp=2 --set parallel.pp=2)
else
  launch=("$bin")
  layout=()
fi
"${launch[@]}" "${tiny[@]}" "${layout[@]}" --run-dir "$work/run" >"$work/out" 2>&1 ||
  { cat "$work/out"; fail "training the checkpoint"; echo "0 passed, 1 failed"; exit 1; }
want_tp=1
[ ${#layout[@]} -gt 0 ] && want_tp=2
$py -c "import glob, json, sys; m = json.load(open(glob.glob(sys.argv[1] + '/checkpoints/step_*/manifest.json')[0])); sys.exit(0 if m['layout']['tp'] == int(sys.argv[2]) else 1)" \
  "$work/run" "$want_tp" && pass=$((pass + 1)) || fail "the checkpoint is not of the layout asked for"

if "$bin" export "$work/run" --format hf --out "$work/hf" >"$work/out" 2>&1; then
  pass=$((pass + 1))
else
  fail "export: $(cat "$work/out")"
fi

# Every tensor under Hugging Face's name: Conv1D weights transposed, the
# embedding without its padding rows, nothing else.
$py - "$work/run" "$work/hf" "$root/tests/cli" <<'PY' && pass=$((pass + 1)) || fail "exported tensors"
import glob, json, sys
sys.path.insert(0, sys.argv[3])
import numpy as np
from checkpoint_io import load_checkpoint, load_safetensors
ours = load_checkpoint(sorted(glob.glob(sys.argv[1] + "/checkpoints/step_*"))[-1])
hf = load_safetensors(sys.argv[2] + "/model.safetensors")
cfg = json.load(open(sys.argv[2] + "/config.json"))
bad = []
for name, w in ours.items():
    want = w.T if name.endswith((".c_attn.weight", ".c_proj.weight", ".c_fc.weight")) else w
    if name == "transformer.wte.weight":
        want = w[:cfg["vocab_size"]]
    if name not in hf or not np.array_equal(hf[name], want):
        bad.append(name)
bad += [f"extra {n}" for n in hf if n not in ours]
want_cfg = {"model_type": "gpt2", "n_layer": 2, "n_head": 2, "n_embd": 32, "n_positions": 32,
            "vocab_size": 58, "activation_function": "gelu_new", "tie_word_embeddings": True,
            "layer_norm_epsilon": 1e-5, "resid_pdrop": 0.0}
bad += [f"config {k}={cfg.get(k)!r}" for k, v in want_cfg.items() if cfg.get(k) != v]
tok = json.load(open(sys.argv[2] + "/tokenizer.json"))
if len(tok["model"]["vocab"]) != 58:
    bad.append("tokenizer.json vocabulary")
print("; ".join(bad) if bad else f"{len(hf)} tensors and config.json as expected")
sys.exit(1 if bad else 0)
PY

# Import, then the same greedy text from the original and the import.
if "$bin" import "$work/hf" --out "$work/imp" >"$work/out" 2>&1; then
  pass=$((pass + 1))
else
  fail "import: $(cat "$work/out")"
fi
greedy=(--prompt "First" --tokens 40 --temperature 0 --threads 1)
"$bin" sample --checkpoint "$work/run" "${greedy[@]}" >"$work/a" 2>&1
"$bin" sample --checkpoint "$work/imp" "${greedy[@]}" >"$work/b" 2>&1
if cmp -s "$work/a" "$work/b" && [ "$(wc -c <"$work/a")" -gt 40 ]; then
  pass=$((pass + 1))
else
  fail "greedy samples differ: $(cat "$work/a") / $(cat "$work/b")"
fi

# training.init_from: step 0, a fresh optimizer, the imported weights (its
# first loss well below a fresh model's).
first_loss() { $py -c "import json,sys; r=json.loads(open(sys.argv[1]).readline()); print(r['step'], r['loss'])" "$1/metrics.jsonl"; }
"$bin" "${tiny[@]}" --set training.steps=3 --run-dir "$work/fresh" >/dev/null 2>&1
if "$bin" "${tiny[@]}" --set training.steps=3 --set "training.init_from=\"$work/imp\"" \
    --run-dir "$work/tuned" >"$work/out" 2>&1; then
  read -r fstep floss <<<"$(first_loss "$work/fresh")"
  read -r tstep tloss <<<"$(first_loss "$work/tuned")"
  if [ "$tstep" = 1 ] && $py -c "import sys; sys.exit(0 if $tloss < $floss - 0.2 else 1)"; then
    pass=$((pass + 1))
  else
    fail "init_from: first record step $tstep loss $tloss, fresh model's $floss"
  fi
else
  fail "init_from: $(cat "$work/out")"
fi
# The same start at tp 2 (each rank takes its shard of the imported weights).
if command -v mpirun >/dev/null; then
  if timeout 120 mpirun -np 2 "$bin" "${tiny[@]}" --set training.steps=3 --set parallel.tp=2 \
      --set "training.init_from=\"$work/imp\"" --run-dir "$work/tuned_tp2" >"$work/out" 2>&1; then
    read -r _ tp2loss <<<"$(first_loss "$work/tuned_tp2")"
    echo "init_from first loss: one rank $tloss, tp 2 $tp2loss, fresh model $floss"
    $py -c "import sys; sys.exit(0 if abs($tp2loss - $tloss) <= 1e-5 * abs($tloss) else 1)" &&
      pass=$((pass + 1)) || fail "init_from at tp 2: first loss $tp2loss, one rank's $tloss"
  else
    fail "init_from at tp 2: $(cat "$work/out")"
  fi
fi
expect_error "training.init_from needs" "${tiny[@]}" --set model.n_embd=48 \
  --set "training.init_from=\"$work/imp\"" --run-dir "$work/wrong"
expect_error "training.init_from" "${tiny[@]}" --set "training.init_from=\"$work/nothing\"" \
  --run-dir "$work/wrong2"

# Export: an --out that holds files, a missing or damaged checkpoint.
expect_error "already holds files" export "$work/run" --format hf --out "$work/hf"
[ -f "$work/hf/config.json" ] && [ -z "$(ls -A "$work" | grep '^\.tmp')" ] && pass=$((pass + 1)) || fail "the busy --out was touched"
expect_error "does not exist" export "$work/nothing" --format hf --out "$work/x1"
cp -r "$work/imp" "$work/damaged"
printf 'xxxx' | dd of="$work/damaged/checkpoints/step_00000000/model.safetensors" bs=1 seek=200 conv=notrunc 2>/dev/null
expect_error "checksum" export "$work/damaged/checkpoints/step_00000000" --format hf --out "$work/x2"
[ ! -e "$work/x1" ] && [ ! -e "$work/x2" ] && pass=$((pass + 1)) || fail "a failed export left its --out"

# Import: a directory whose config.json and tensors disagree, or that cannot be imported.
variant() {  # variant NAME 'python editing cfg (dict) and t (dict name -> array)'
  mkdir -p "$work/$1"
  $py - "$work/hf" "$work/$1" "$root/tests/cli" "$2" <<'PY'
import json, struct, sys
sys.path.insert(0, sys.argv[3])
import numpy as np
from checkpoint_io import load_safetensors
cfg = json.load(open(sys.argv[1] + "/config.json"))
t = dict(load_safetensors(sys.argv[1] + "/model.safetensors"))
exec(sys.argv[4])
header, blobs, at = {"__metadata__": {"format": "pt"}}, [], 0
for name, a in t.items():
    b = np.ascontiguousarray(a, dtype="<f4").tobytes()
    header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [at, at + len(b)]}
    blobs.append(b)
    at += len(b)
h = json.dumps(header).encode()
with open(sys.argv[2] + "/model.safetensors", "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
json.dump(cfg, open(sys.argv[2] + "/config.json", "w"))
PY
}
# refused NAME EDIT MESSAGE: the checkpoint variant() edits is refused with MESSAGE.
refused() {
  variant "$1" "$2"
  expect_error "$3" import "$work/$1" --out "$work/y"
}
refused embd 'cfg["n_embd"] = 48' "config.json and model.safetensors disagree"
refused more 'cfg["n_layer"] = 3' "no tensor 'transformer.h.2.ln_1.weight'"
refused fewer 'cfg["n_layer"] = 1' "does not describe"
refused drop 'del t["transformer.h.1.mlp.c_fc.bias"]' "no tensor 'transformer.h.1.mlp.c_fc.bias'"
refused shape 't["transformer.h.0.attn.c_proj.weight"] = t["transformer.h.0.attn.c_proj.weight"][:, :16]' "c_proj.weight' is"
refused mistral 'cfg["model_type"] = "mistral"' '"model_type" is "mistral"; scaletrain imports gpt2, llama models'
refused untied 'cfg["tie_word_embeddings"] = False' '"tie_word_embeddings" is false'
refused head 't["lm_head.weight"] = t["transformer.wte.weight"] * 2' "not tied to the embedding"
refused eps 'cfg["layer_norm_epsilon"] = 1e-6' "layer_norm_epsilon"
variant tied_head 't["lm_head.weight"] = t["transformer.wte.weight"].copy()'
"$bin" import "$work/tied_head" --out "$work/y" >/dev/null 2>&1 && pass=$((pass + 1)) || fail "a tied lm_head.weight was refused"
rm -rf "$work/y"
# GPT2Model's names (no "transformer." prefix) and older transformers' mask buffers.
variant bare 't = {k[len("transformer."):]: v for k, v in t.items()}; t["h.0.attn.bias"] = np.ones((1, 1, 32, 32), "f4")'
"$bin" import "$work/bare" --out "$work/y" >/dev/null 2>&1 &&
  cmp -s "$work/y/checkpoints/step_00000000/model.safetensors" "$work/imp/checkpoints/step_00000000/model.safetensors" &&
  pass=$((pass + 1)) || fail "unprefixed names with mask buffers did not import to the same weights"
rm -rf "$work/y"
mkdir -p "$work/noconfig" "$work/nomodel"
cp "$work/hf/model.safetensors" "$work/noconfig/"
cp "$work/hf/config.json" "$work/nomodel/"
expect_error "has no config.json" import "$work/noconfig" --out "$work/y"
expect_error "has no model.safetensors" import "$work/nomodel" --out "$work/y"
expect_error "already holds files" import "$work/hf" --out "$work/imp"
[ ! -e "$work/y" ] && pass=$((pass + 1)) || fail "a failed import left its --out"

echo "$pass passed, $fails failed"
[ $fails -eq 0 ]
