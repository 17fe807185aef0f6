#!/usr/bin/env bash
# The GPU leg in one run: every GPU measurement the issues ask for (about 7 minutes on one
# H100, 2026-11-26; each part has its own time limit).
#
#     bash benchmarks/gpu_leg.sh OUT            # from the repository root, on a CUDA machine
#
# 1. The CUDA tests (side-stream copies, events, record_stream, widening and gathers on the
#    device), which skip on a CPU: tests/device and the bench's device tests.
# 2. Efficiency E (step time on batches already on the device / with the loader) of packed,
#    packed+prefetch and gpu-resident: a DistilBERT-sized cross-encoder (benchmarks/gpu_prep.py),
#    32 groups x 8 documents, max length 512, bf16, one GPU, 3 repeats of a 2 s window (9 runs
#    of ~25 s each on an H200: T_TRAIN's 260 s; 150 s cut the last strategy to one repeat).
# 3. `lading train lm` (GPT) and `lading train sessions` with and without --no-prefetch,
#    interleaved twice (log.jsonl's tokens/s and sessions/s).
# 4. The loader-mode grid on the GPU (every store strategy, 1 process).
# 5. The cross-encoder trained from a store in the local S3 (30 ms GETs) against the same run
#    from a local store (benchmarks/gpu_remote.py; needs obstore and moto[server], and s3fs for
#    its DataLoader-worker runs, which read through fsspec after the fork: carry their wheels
#    where the machine lacks them; RESULTS.md "GPU leg (H200), 2026-11-29" lists the set).
# QUERIES=800 makes the data's epochs 25 batches long, not 4 (part 5's 4-worker rows otherwise
# meet an epoch start every 4th step; RESULTS.md "GPU leg (H200), 2026-12-04").
# PARTS="1 2 5" runs a subset (parts 3 and 5 need the data part 2 makes, made when part 2, 3
# or 5 is asked).
# Each part has its own time limit, so a slow part leaves the next ones their time; what each
# wrote lands in OUT (at most 8 files: setup.log tests.log train.json train.md runs.jsonl
# loader.json loader.md remote_train.json).
set -u
OUT=${1:?usage: gpu_leg.sh OUT}
W=${GPU_LEG_WORK:-/tmp/gpu-leg}
PY=${PYTHON:-python3}
mkdir -p "$OUT" "$W"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=true
t0=$(date +%s)
stamp() { echo "[gpu_leg +$(($(date +%s) - t0))s] $*"; }

stamp setup
{ nvidia-smi; $PY -c "import torch, lading; print(torch.__version__, torch.cuda.is_available(),
torch.cuda.get_device_name(0) if torch.cuda.is_available() else '-', lading.__file__)"; } \
  >>"$OUT/setup.log" 2>&1
$PY -c "from lading.disk import native; print('native helper:', native.load())" >>"$OUT/setup.log" 2>&1

PARTS=" ${PARTS:-1 2 3 4 5} "
part() { [[ "$PARTS" == *" $1 "* ]]; }

if part 1; then
stamp "1 CUDA tests"
timeout "${T_TESTS:-150}" $PY -m pytest -q -p no:cacheprovider -rs --timeout=60 tests/device \
  tests/bench/test_device_bench.py tests/bench/test_bench_flags.py tests/train/test_loop.py >"$OUT/tests.log" 2>&1
tail -3 "$OUT/tests.log"
fi

if part 2 || part 3 || part 5; then
stamp "2 data and model"
[ -f "$W/model/tokenizer.json" ] || timeout "${T_PREP:-120}" $PY benchmarks/gpu_prep.py "$W" --documents "${DOCS:-10000}" \
  --sessions "${SESSIONS:-100000}" ${QUERIES:+--queries "$QUERIES"} >>"$OUT/setup.log" 2>&1
fi
D=$W/docs
if part 2; then
stamp "2 efficiency E"
timeout "${T_TRAIN:-260}" $PY -m lading bench --corpus "$D/docs.jsonl" --queries "$D/queries.tsv" \
  --qrels "$D/qrels.txt" --negatives "$D/run.trec" \
  --strategies packed,packed+prefetch,gpu-resident --modes train --world-sizes 1 \
  --batch-size "${BATCH:-32}" --group-size "${GROUP:-8}" --max-length "${MAXLEN:-512}" --model "$W/model" --precision bf16 \
  --seconds "${SECONDS_WINDOW:-2}" --repeats 3 --out "$W/train" >>"$OUT/setup.log" 2>&1
cp "$W/train/results.json" "$OUT/train.json" 2>/dev/null
cp "$W/train/report.md" "$OUT/train.md" 2>/dev/null
fi

if part 3; then

stamp "3 lm and sessions, with and without prefetch"
head -n "${LM_DOCS:-3000}" "$D/docs.jsonl" >"$W/lm.jsonl"
$PY -m lading lm build "$W/lm.jsonl" "$W/lm" --tokenizer "$W/bpe.json" --quiet >>"$OUT/setup.log" 2>&1
for round in 1 2; do
  for flag in "" --no-prefetch; do
    name="lm${flag:+-noprefetch}-$round"
    timeout 45 $PY -m lading train lm --corpus "$W/lm" --out "$W/$name" --arch gpt --bptt 512 \
      --batch-size "${LM_BATCH:-32}" --emb 512 --layers 4 --heads 8 --steps "${LM_STEPS:-150}" --log-every 25 \
      --eval-batches 4 --parallel none $flag >>"$OUT/setup.log" 2>&1
    sed "s/^/{\"run\": \"$name\", \"record\": /; s/$/}/" "$W/$name/log.jsonl" >>"$OUT/runs.jsonl"
    name="sessions${flag:+-noprefetch}-$round"
    timeout 50 $PY -m lading train sessions --data "$W/sessions" --out "$W/$name" \
      --batch-size 512 --steps "${SESSION_STEPS:-150}" --log-every 25 --parallel none $flag \
      >>"$OUT/setup.log" 2>&1
    sed "s/^/{\"run\": \"$name\", \"record\": /; s/$/}/" "$W/$name/log.jsonl" >>"$OUT/runs.jsonl"
  done
done
fi

if part 4; then
stamp "4 loader-mode grid"
timeout "${T_LOADER:-120}" $PY -m lading bench --world-sizes 1 --modes loader --pin-memory \
  --strategies memory,offsets,packed,packed-text,packed+prefetch,gpu-resident \
  --repeats 2 --out "$W/loader" >>"$OUT/setup.log" 2>&1
cp "$W/loader/results.json" "$OUT/loader.json" 2>/dev/null
cp "$W/loader/report.md" "$OUT/loader.md" 2>/dev/null
fi

if part 5; then
stamp "5 cross-encoder from the local S3 vs a local store"
timeout "${T_REMOTE:-480}" $PY benchmarks/gpu_remote.py "$W" "$OUT" --steps "${REMOTE_STEPS:-60}" \
  --rounds "${REMOTE_ROUNDS:-2}" --batch-size "${BATCH:-32}" --group-size "${GROUP:-8}" \
  --max-length "${MAXLEN:-512}" --precision bf16 >>"$OUT/setup.log" 2>&1
tail -10 "$OUT/setup.log"
fi
stamp done
