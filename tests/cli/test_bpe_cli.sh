#!/usr/bin/env bash
# Byte-level BPE end to end: `data prepare --tokenizer bpe` then train and
# sample (from the checkpoint alone); each bad input (one error line, a
# non-zero exit, nothing written); and, where PyPI's `tokenizers` can be
# imported, token-for-token equality with it both ways: its trained files
# loaded by `--tokenizer hf`, and our trained pair loaded by it.
# Usage: test_bpe_cli.sh PATH/TO/scaletrain REPO_ROOT
. "$(dirname "$0")/lib.sh"
st_cli_init "$@"
check=$root/tests/cli/bpe_hf_check.py

# --- ours: train a BPE, a model on it, sample ------------------------------
head -c 200000 "$root/data/tinyshakespeare.txt" >"$work/small.txt"
if "$bin" data prepare --tokenizer bpe --vocab-size 600 --input "$work/small.txt" --output "$work/data" \
    >"$work/out" 2>&1 && grep -q "bpe vocab 600" "$work/out"; then
  pass=$((pass + 1))
else
  fail "data prepare --tokenizer bpe: $(cat "$work/out")"
fi
for f in train.bin val.bin vocab.json hf_vocab.json hf_merges.txt; do
  [ -s "$work/data/$f" ] && pass=$((pass + 1)) || fail "no $f"
done
st_tiny_train_args
if "$bin" "${tiny[@]}" --set training.steps=4 --set checkpoint.interval=4 --run-dir "$work/run" \
    >"$work/train.out" 2>&1; then
  pass=$((pass + 1))
else
  fail "train on BPE data: $(tail -5 "$work/train.out")"
fi
# The model's vocabulary is the data's 600 tokens.
grep -q '"vocab_size": *600' "$work/run/checkpoints/step_00000004/manifest.json" &&
  pass=$((pass + 1)) || fail "the checkpoint's model does not have vocab_size 600"
mv "$work/data" "$work/data.moved"  # sampling needs only the checkpoint
if "$bin" sample --checkpoint "$work/run" --prompt "ROMEO: the king's" --tokens 20 --threads 1 \
    >"$work/sample.out" 2>&1 && grep -q "^ROMEO: the king's" "$work/sample.out"; then
  pass=$((pass + 1))
else
  fail "sample from a BPE checkpoint: $(cat "$work/sample.out")"
fi
mv "$work/data.moved" "$work/data"

# --- bad input: one error line, non-zero exit, nothing written -------------
out=$work/never
printf '{"a": 0, "b": 1, "ab": 2, "c": 3}' >"$work/v.json"
printf '#version: 0.2\na b\nab c d\n' >"$work/bad_line.txt"
printf 'a b\na x\n' >"$work/bad_part.txt"
printf 'a b\n' >"$work/m.txt"
printf '["a", "b"]' >"$work/list.json"
expect_error "--tokenizer bpe needs --vocab-size" data prepare --tokenizer bpe --input "$work/small.txt" --output "$out"
expect_error "--vocab-size must be at least 256" data prepare --tokenizer bpe --vocab-size 100 --input "$work/small.txt" --output "$out"
expect_error "missing --merges" data prepare --tokenizer hf --vocab "$work/v.json" --input "$work/small.txt" --output "$out"
expect_error "$work/bad_line.txt line 3: expected two tokens" data prepare --tokenizer hf --vocab "$work/v.json" \
  --merges "$work/bad_line.txt" --input "$work/small.txt" --output "$out"
expect_error "$work/bad_part.txt line 2: \"x\" is not a token" data prepare --tokenizer hf --vocab "$work/v.json" \
  --merges "$work/bad_part.txt" --input "$work/small.txt" --output "$out"
expect_error "$work/list.json is not a JSON object" data prepare --tokenizer hf --vocab "$work/list.json" \
  --merges "$work/m.txt" --input "$work/small.txt" --output "$out"
expect_error "unknown tokenizer 'wordpiece'" data prepare --tokenizer wordpiece --input "$work/small.txt" --output "$out"
expect_error "without --tokenizer hf" data prepare --vocab "$work/v.json" --input "$work/small.txt" --output "$out"
[ ! -e "$out" ] && pass=$((pass + 1)) || fail "a failed prepare wrote $out"
# A failure over a prepared directory leaves it as it was.
sum_before=$(cat "$work/data"/* | md5sum)
expect_error "line 3" data prepare --tokenizer hf --vocab "$work/v.json" --merges "$work/bad_line.txt" \
  --input "$work/small.txt" --output "$work/data"
[ "$(cat "$work/data"/* | md5sum)" = "$sum_before" ] && pass=$((pass + 1)) || fail "a failed prepare changed $work/data"
# The old spelling still works.
"$bin" data prepare --vocab byte --input "$work/small.txt" --output "$work/bytes" >"$work/out" 2>&1 &&
  grep -q "byte vocab 256" "$work/out" && pass=$((pass + 1)) || fail "--vocab byte: $(cat "$work/out")"

# --- against Hugging Face tokenizers ---------------------------------------
if ! "$py" -c "import tokenizers" 2>/dev/null; then
  echo "SKIP (partly): python3 cannot import tokenizers (scripts/install-deps.sh installs it); $pass passed so far"
  echo "$pass passed, $fails failed"
  [ $fails -eq 0 ]
  exit
fi
# Text meant to catch differences: accents, CJK, Cyrillic, an emoji, digits,
# contractions of both cases, runs of spaces, tabs, newlines, a no-break space.
{
  printf "I'm sure they'll say: \"we'd won 42-7!\" DON'T   stop.\n\n\n"
  printf "caf\xc3\xa9 na\xc3\xafve \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xd0\x9f\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82 \xf0\x9f\x99\x82\xf0\x9f\x99\x82 3.14159 x2\n"
  printf "\t tabs\t\tand  double  spaces \xc2\xa0nbsp\xc2\xa0 end   \n  \n"
  head -c 20000 "$root/data/tinyshakespeare.txt"
  printf "\n   trailing spaces   "
} >"$work/test.txt"

"$py" "$check" train "$root/data/tinyshakespeare.txt" 2000 "$work/hf" >"$work/out" 2>&1 ||
  fail "tokenizers could not train: $(tail -3 "$work/out")"
if "$bin" data prepare --tokenizer hf --vocab "$work/hf/vocab.json" --merges "$work/hf/merges.txt" \
    --input "$work/test.txt" --output "$work/d_hf" >"$work/out" 2>&1; then
  "$py" "$check" compare "$work/hf/vocab.json" "$work/hf/merges.txt" "$work/test.txt" "$work/d_hf" >"$work/cmp" 2>&1 &&
    pass=$((pass + 1)) || fail "--tokenizer hf differs from tokenizers: $(cat "$work/cmp")"
else
  fail "data prepare --tokenizer hf: $(cat "$work/out")"
fi
# Ours, trained on the test text, exported as the HF pair, loaded by tokenizers.
if "$bin" data prepare --tokenizer bpe --vocab-size 1500 --input "$work/test.txt" --output "$work/d_ours" \
    >"$work/out" 2>&1; then
  "$py" "$check" compare "$work/d_ours/hf_vocab.json" "$work/d_ours/hf_merges.txt" "$work/test.txt" \
    "$work/d_ours" >"$work/cmp" 2>&1 && pass=$((pass + 1)) || fail "tokenizers reads our BPE otherwise: $(cat "$work/cmp")"
else
  fail "data prepare --tokenizer bpe on the test text: $(cat "$work/out")"
fi

echo "$pass passed, $fails failed"
[ $fails -eq 0 ]
