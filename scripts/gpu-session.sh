#!/usr/bin/env bash
# The GPU measurements (speed beside PyTorch on the same GPU) in one device call, for a session
# that is lent a GPU machine. That machine reaches nothing outside, has PyTorch but no Vulkan
# loader and no Rust, so the binary is built here and carried with the loader's packages.
#
#   here:   [SPIRV=1] scripts/gpu-session.sh pack
#           builds `s2s` (release, default features; with SPIRV=1 also `--features spirv`, packed
#           as .devbin/s2s-spirv.xz), writes .devbin/ (the stripped binary,
#           xz-packed, ../shared/bench and ../shared/datasets/multi30k, the bench shapes) and
#           .gl/ (Debian's Vulkan loader and GL dispatch packages), lists both in
#           .git/info/exclude so they are never committed, and prints what travels.
#   there:  device run, carry [".gl", ".devbin"], command `scripts/gpu-session.sh run [WHAT]`
#           WHAT, any of (default `driver auto probe bench`), run in that order of the words:
#             driver  nvidia-smi, the Vulkan ICD file and `ldd` of its library, the loader:
#                     $OUT/driver.txt; says what is missing and stops if no adapter answers
#             auto    what `--device auto` picks: $OUT/auto.txt
#             probe   `s2s bench --launch-probe` (host µs a launch, eager and replayed):
#                     $OUT/probe.jsonl
#             bench   scripts/bench-vs-torch.sh --device wgpu --capture against PyTorch on CUDA,
#                     at the reference shape and at ~4,096 target tokens
#                     (experiments/bench/multi30k-4k.json): $OUT/bench-*.md and raw JSON lines
#             precision  both precisions of both sides at ~4,096 target tokens: ours
#                     `--precision f32` and `--precision mixed` (eager), PyTorch through
#                     scripts/torch_precision.py (f32 with TF32 off; autocast f16 with a
#                     GradScaler): $OUT/bench-f32.md, $OUT/bench-mixed.md and raw JSON lines
#             spirv   the SPIR-V build (packed with SPIRV=1) beside the WGSL build and PyTorch on
#                     CUDA at ~4,096 target tokens, with both builds' last training losses, and
#                     its launch probe: $OUT/bench-spirv.md, $OUT/spirv-probe.jsonl; a later
#                     multi30k step trains with it if its losses agree and it is faster
#             products  `s2s bench --product-probe` (burn's matrix product and every table kernel at a training step's
#                     shapes, f32 and f16) with the WGSL build and the SPIR-V one if packed, and
#                     PyTorch's at the same shapes (f32, tf32, f16, bf16): $OUT/products.md and
#                     the JSON lines under $OUT/products/
#             split   training at ~4,096 target tokens with weight gradients in blocks of rows
#                     (S2S_GPU_SPLIT_ROWS=1) and without, alternated over two rounds, with the
#                     SPIR-V build where packed: $OUT/split.jsonl and $OUT/split.md
#             kernels scripts/gpu-kernel-time.sh at ~4,096 target tokens: each training step's
#                     device time per kernel: $OUT/kernel-time.txt
#             capture `s2s bench --capture on` per model at both shapes, errors included:
#                     $OUT/capture.txt
#             tasks   `s2s bench --device wgpu` with CUBECL_WGPU_MAX_TASKS at 32, 128, 512:
#                     $OUT/max-tasks.jsonl
#             multi30k  experiments/multi30k-gpu.toml (its minutes set to the time left: the
#                     Transformer 60 %, Luong 40 %, or MULTI30K_ONLY=transformer|luong alone) on
#                     the GPU: $OUT/multi30k/<model>/ with test2016 hypotheses, scores and the
#                     metrics (not the checkpoints); MULTI30K_PRECISION=mixed trains in mixed
#                     precision (f16 products, dynamic loss scaling; its steps eager)
#   or:     command `scripts/gpu-session.sh device [WHAT]`: the same, packed into
#           $OUT/results.tgz (the tool brings back at most 8 files), log.txt and the tables beside it
#           Every step's output also goes to $OUT/log.txt; the machine's description to env.txt.
#           JSON lines are written as they are produced, so a timeout keeps what was measured;
#           the run stops starting new work after BUDGET seconds (default 480: 8 minutes).
#   after:  the docs' GPU table from what came back, e.g. `scripts/bench-vs-torch.sh --device wgpu
#           --from RESULTS/bench-spirv --doc "H200"` (the run's date, commit and versions kept).
# The prepared call, first whenever a session is lent a GPU (packed with `scripts/gpu-session.sh
# pack`, rehearsed on lavapipe with STEPS=2 TORCH_DEVICE=cpu PRECISION_SHAPES=experiments/bench/
# launch-bound.json; PyTorch's CPU LSTM refuses autocast f16 in oneDNN, its CUDA one does not):
#   device run, carry [".gl", ".devbin"], timeout_s 580, command
#   BUDGET=520 MULTI30K_ONLY=transformer MULTI30K_PRECISION=mixed scripts/gpu-session.sh device driver precision products multi30k
# PRECISION_SHAPES names the precision step's shapes (default experiments/bench/multi30k-4k.json).
# TRAIN_BUILD=spirv makes the multi30k step train with the SPIR-V build without the spirv step.
# Steps and models can be narrowed for a try-out: STEPS=2 MODELS=lstm scripts/gpu-session.sh run
# runs on any machine with a Vulkan driver (lavapipe too) and python3 with torch; TORCH_DEVICE
# (default cuda) names PyTorch's device.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian's packages of the Vulkan loader and the GL dispatch libraries NVIDIA's ICD links to.
LOADER="libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2"

pack() {
  local target=${CARGO_TARGET_DIR:-target}
  mkdir -p .devbin/shared/datasets .gl .git/info
  for d in /.devbin/ /.gl/; do
    grep -qxF "$d" .git/info/exclude 2>/dev/null || echo "$d" >> .git/info/exclude
  done
  # SPIRV=1: a second binary built with the `spirv` feature, for the `spirv` step. Built first,
  # so that the default build is the one left in target/release.
  if [ "${SPIRV:-0}" = 1 ]; then
    cargo build --release -p s2s --features spirv
    strip -o .devbin/s2s-spirv "$target/release/s2s"
    xz -f -T2 .devbin/s2s-spirv
  fi
  cargo build --release -p s2s
  strip -o .devbin/s2s "$target/release/s2s"
  xz -f -T2 .devbin/s2s
  local shared=${S2S_SHARED:-../shared}
  rm -rf .devbin/shared/bench .devbin/shared/datasets/multi30k
  cp -r "$shared/bench" .devbin/shared/bench
  cp -r "$shared/datasets/multi30k" .devbin/shared/datasets/multi30k
  git rev-parse HEAD > .devbin/commit
  local missing=()
  for p in $LOADER; do ls .gl/"${p}"_*.deb >/dev/null 2>&1 || missing+=("$p"); done
  if [ ${#missing[@]} -gt 0 ]; then
    local o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
    mkdir -p /tmp/amd64/partial
    # shellcheck disable=SC2086
    apt-get $o update -qq && (cd .gl && apt-get $o download "${missing[@]}")
  fi
  du -sh .devbin .gl
  du -cb .devbin .gl | tail -1 | awk '{printf "travels: %.1f MiB (the limit is 64)\n", $1 / 1048576}'
}

# The driver: what answers, and what is missing. Returns non-zero when no Vulkan adapter answers.
driver() {
  local out=$1 bin=$2 ok=0
  {
    echo "== nvidia-smi"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 || echo "MISSING: nvidia-smi"
    echo "== Vulkan ICD"
    local icds
    icds=$(ls /usr/local/nvidia/share/vulkan/icd.d/*.json /usr/share/vulkan/icd.d/*.json /etc/vulkan/icd.d/*.json 2>/dev/null || true)
    [ -n "$icds" ] || echo "MISSING: no Vulkan ICD file (nvidia_icd.json, or lavapipe's lvp_icd.*.json)"
    for f in $icds; do
      echo "$f"
      local lib
      lib=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["ICD"]["library_path"])' "$f" 2>/dev/null || true)
      echo "  library: ${lib:-?}"
      if [ -n "$lib" ]; then
        local path=$lib
        [ -e "$path" ] || path=$(ldconfig -p | awk -v l="$lib" '$1 == l {print $NF; exit}')
        if [ -n "$path" ] && [ -e "$path" ]; then
          ldd "$path" | grep -i 'not found' | sed 's/^/  MISSING: /' || echo "  every library it links is found"
        else
          echo "  MISSING: $lib not found"
        fi
      fi
    done
    echo "== loader"
    ldconfig -p | grep -E 'libvulkan.so.1|libGLX.so.0|libEGL.so.1' || echo "MISSING: the Vulkan loader"
    echo "== adapter"
    if "$bin" bench --device wgpu --launch-probe --probe-kernels 2 --steps 1 --json > /dev/null 2> "$out/adapter.txt"; then
      grep -i device "$out/adapter.txt" || true
    else
      echo "MISSING: no wgpu adapter answers:"; tail -5 "$out/adapter.txt"; ok=1
    fi
  } | tee "$out/driver.txt"
  return $ok
}

run() {
  local out=${OUT:?run this on the device machine, where OUT names the folder that comes back}
  local what=${*:-driver auto probe bench} steps=${STEPS:-20} models=${MODELS:-lstm,bahdanau,luong,transformer}
  local budget=${BUDGET:-480} bench_budget=${BENCH_BUDGET:-270}
  exec > >(tee -a "$out/log.txt") 2>&1
  # The Vulkan loader, where the machine lacks one (the GPU machines do); never over one it has.
  if ! ldconfig -p | grep -q 'libvulkan.so.1'; then
    for f in .gl/*.deb; do dpkg -x "$f" /; done
    ldconfig
  fi
  local icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
  [ -f "$icd" ] && export VK_DRIVER_FILES=$icd
  export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-$(mktemp -d)}
  local bin=/tmp/s2s-gpu-session spirv=/tmp/s2s-gpu-session-spirv
  xz -dc .devbin/s2s.xz > "$bin" && chmod +x "$bin"
  rm -f "$spirv"
  if [ -f .devbin/s2s-spirv.xz ]; then xz -dc .devbin/s2s-spirv.xz > "$spirv" && chmod +x "$spirv"; fi
  # The binary the multi30k step trains with; the spirv step may choose the SPIR-V build.
  local train_bin=$bin
  [ "${TRAIN_BUILD:-}" = spirv ] && [ -x "$spirv" ] && train_bin=$spirv
  {
    echo "commit $(cat .devbin/commit 2>/dev/null || echo unknown), $(date -u +%FT%TZ)"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available())' 2>&1 || echo "no torch"
    nproc
  } | tee "$out/env.txt"
  for w in $what; do
    if [ "$SECONDS" -ge "$budget" ]; then echo "budget of ${budget}s spent: $w and what follows skipped"; break; fi
    echo "== $w (at ${SECONDS}s)"
    case $w in
      driver)
        driver "$out" "$bin" || { echo "no GPU adapter: stopping"; return 1; };;
      auto)
        "$bin" bench --device auto --steps 1 --models lstm --json 2>&1 >/dev/null | grep -i device | tee "$out/auto.txt";;
      probe)
        for k in 200 1000; do
          "$bin" bench --device wgpu --launch-probe --probe-kernels "$k" --steps 20 --json | tee -a "$out/probe.jsonl"
        done;;
      bench)
        # The ~4,096-token shape first: the goals are set there. Both stop at BENCH_BUDGET.
        for shape in multi30k-4k models; do
          local file=experiments/bench/$shape.json keep=$out/bench-$shape
          mkdir -p "$keep"
          S2S_SHARED=.devbin/shared S2S_BIN=$bin TORCH_DEVICE=${TORCH_DEVICE:-cuda} KEEP_JSON=$keep \
            DEADLINE=$((bench_budget - SECONDS)) \
            scripts/bench-vs-torch.sh --device wgpu --steps "$steps" --rounds 1 --models "$models" \
              --shapes "$file" --capture | tee "$out/bench-$shape.md"
        done;;
      precision)
        # Mixed meets mixed and f32 meets f32, at the shape the goals are set at.
        for p in mixed f32; do
          local keep=$out/bench-$p
          mkdir -p "$keep"
          S2S_SHARED=.devbin/shared S2S_BIN=$bin TORCH_DEVICE=${TORCH_DEVICE:-cuda} KEEP_JSON=$keep \
            DEADLINE=$((bench_budget - SECONDS)) RUN_TIMEOUT=${RUN_TIMEOUT:-75} \
            scripts/bench-vs-torch.sh --device wgpu --steps "$steps" --rounds 1 --models "$models" \
              --shapes "${PRECISION_SHAPES:-experiments/bench/multi30k-4k.json}" --precision "$p" | tee "$out/bench-$p.md"
        done;;
      spirv)
        # The SPIR-V build (cubecl's own compiler: push-constant addresses, cooperative-matrix
        # products) beside the default WGSL build and PyTorch on CUDA, at ~4,096 target tokens;
        # each run cut at RUN_TIMEOUT, as the driver may refuse or hang on a kernel. The two
        # builds' last training losses show whether SPIR-V computes the step right; if every
        # model agrees and SPIR-V trains the Transformer faster, the multi30k step uses it.
        [ -x "$spirv" ] || { echo "no SPIR-V build packed (SPIRV=1 scripts/gpu-session.sh pack)"; continue; }
        timeout 60 "$spirv" bench --device wgpu --launch-probe --probe-kernels 200 --steps 20 --json \
          2> "$out/spirv-probe.stderr" | tee "$out/spirv-probe.jsonl" || true
        grep -i device "$out/spirv-probe.stderr" || tail -5 "$out/spirv-probe.stderr"
        local keep=$out/bench-spirv
        mkdir -p "$keep"
        S2S_SHARED=.devbin/shared S2S_BIN=$spirv S2S_BIN_BASE=$bin TORCH_DEVICE=${TORCH_DEVICE:-cuda} \
          KEEP_JSON=$keep DEADLINE=$((bench_budget - SECONDS)) RUN_TIMEOUT=${RUN_TIMEOUT:-75} \
          scripts/bench-vs-torch.sh --device wgpu --steps "$steps" --rounds 1 --models "$models" \
            --shapes experiments/bench/multi30k-4k.json | tee "$out/bench-spirv.md"
        if python3 - "$keep/ours.jsonl" "$keep/base.jsonl" <<'PY'
import json, sys
load = lambda p: {d["model"]: d for d in map(json.loads, open(p))}
spirv, wgsl = load(sys.argv[1]), load(sys.argv[2])
same = lambda a, b: a is not None and b is not None and abs(a - b) <= 1e-2 * max(1.0, abs(b))
ok = bool(wgsl) and all(m in spirv and same(spirv[m].get("train_loss"), w.get("train_loss")) for m, w in wgsl.items())
t = "transformer"
faster = t in spirv and t in wgsl and spirv[t]["train_tokens_per_s"] > wgsl[t]["train_tokens_per_s"]
print(f"SPIR-V losses agree with WGSL's: {ok}; SPIR-V trains the Transformer faster: {faster}")
sys.exit(0 if ok and faster else 1)
PY
        then train_bin=$spirv; echo "multi30k trains with the SPIR-V build"; fi;;
      products)
        # Whether our products run near the GPU's rate, and what f16 operands would buy.
        local keep=$out/products shapes=${PRODUCT_SHAPES:-experiments/bench/multi30k-4k.json}
        mkdir -p "$keep"
        local tables=() build file
        for build in "WGSL=$bin" "SPIR-V=$spirv"; do
          [ -x "${build#*=}" ] || continue
          file=$keep/$(echo "${build%%=*}" | tr 'A-Z' 'a-z' | tr -d -).jsonl
          # Every table kernel too (gemm/table.rs): their first calls compile, hence 150 s. The
          # kernels that beat burn's go to stderr as S2S_GPU_PRODUCTS entries: the table's rows.
          timeout 150 "${build#*=}" bench --device wgpu --product-probe --shapes "$shapes" --steps 20 --json \
            > "$file" 2> "$keep/$(basename "$file" .jsonl)-table.txt" || echo "${build%%=*} product probe failed ($?)"
          cat "$keep/$(basename "$file" .jsonl)-table.txt"
          [ -s "$file" ] && tables+=("${build%%=*}=$file")
        done
        [ ${#tables[@]} -gt 0 ] || { echo "no product probe answered: PyTorch's skipped"; continue; }
        # PyTorch at the shapes the first build that answered timed.
        timeout 90 python3 scripts/product-probe.py time "${tables[0]#*=}" --device "${TORCH_DEVICE:-cuda}" \
          > "$keep/torch.jsonl" || echo "PyTorch product probe failed ($?)"
        tables+=("torch=$keep/torch.jsonl")
        python3 scripts/product-probe.py table "${tables[@]}" | tee "$out/products.md";;
      split)
        # Whether ∂W in blocks of rows (crates/s2s-kernels/src/gemm/split_rows.rs) trains faster.
        local sbin=$bin
        [ -x "$spirv" ] && sbin=$spirv
        for round in 1 2; do
          for m in ${models//,/ }; do
            for on in 0 1; do
              [ "$SECONDS" -ge "$budget" ] && break 3
              S2S_GPU_SPLIT_ROWS=$on timeout 90 "$sbin" bench --device wgpu --shapes "${SPLIT_SHAPES:-experiments/bench/multi30k-4k.json}" \
                --steps "$steps" --models "$m" --no-decode --json | sed "s/^{/{\"split\":$on,\"round\":$round,/" \
                | tee -a "$out/split.jsonl" || echo "$m with S2S_GPU_SPLIT_ROWS=$on failed"
            done
          done
        done
        python3 - "$out/split.jsonl" <<'PY' | tee "$out/split.md"
import json, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
print("| model | train tok/s, burn's ∂W | in blocks of rows | ratio | last loss, burn's | in blocks |")
print("|---|---|---|---|---|---|")
for m in dict.fromkeys(r["model"] for r in runs):
    way = lambda on: [r for r in runs if r["model"] == m and r["split"] == on]
    whole, split = way(0), way(1)
    if not whole or not split:
        continue
    tok = lambda rs: sum(r["train_tokens_per_s"] for r in rs) / len(rs)
    print(f"| {m} | {tok(whole):,.0f} | {tok(split):,.0f} | {tok(split) / tok(whole):.2f}× "
          f"| {whole[-1]['train_loss']:.5f} | {split[-1]['train_loss']:.5f} |")
PY
        ;;
      kernels)
        # Where a training step's device time goes, per kernel (cubecl's profiling log).
        S2S_BIN=$bin timeout $((budget - SECONDS)) scripts/gpu-kernel-time.sh --models "$models" \
          --shapes experiments/bench/multi30k-4k.json --top 10 | tee "$out/kernel-time.txt";;
      capture)
        # Captured decoding at both bench shapes, each model alone, with its error if any.
        for shape in multi30k-4k models; do
          for m in ${models//,/ }; do
            [ "$SECONDS" -ge "$budget" ] && break 2
            echo "-- $shape $m"
            timeout $((budget - SECONDS)) "$bin" bench --device wgpu --shapes "experiments/bench/$shape.json" \
              --steps 4 --models "$m" --capture on --json 2>&1 | grep -v '^device:' || true
          done
        done | tee "$out/capture.txt";;
      tasks)
        for tasks in 32 128 512; do
          for m in ${models//,/ }; do
            [ "$SECONDS" -ge "$budget" ] && break 2
            CUBECL_WGPU_MAX_TASKS=$tasks timeout $((budget - SECONDS)) "$bin" bench --device wgpu --steps "$steps" --models "$m" --json \
              | sed "s/^{/{\"max_tasks\":$tasks,/" | tee -a "$out/max-tasks.jsonl"
          done
        done;;
      multi30k)
        # The experiment reads ../shared, which the device machine lacks: the packed copy instead.
        # The Transformer gets 60 % of the training time left, the Luong model the rest; each
        # run also spends about 45 s outside its budget (data, start-up, test decoding).
        # MULTI30K_ONLY=transformer (or luong) trains that model alone, with all the time left.
        local only=${MULTI30K_ONLY:-} left=$(( budget - SECONDS - 90 )) share=0.6
        [ -n "$only" ] && { left=$(( budget - SECONDS - 45 )); share=1; }
        [ "$left" -ge 60 ] || { echo "multi30k: ${left}s of training left, too few: skipped"; continue; }
        local tmin lmin
        tmin=$(awk -v l="$left" -v s="$share" 'BEGIN { printf "%.2f", l * s / 60 }')
        lmin=$(awk -v l="$left" -v s="$share" 'BEGIN { printf "%.2f", l * (s < 1 ? 1 - s : 1) / 60 }')
        echo "training budgets: transformer $tmin min, luong $lmin min"
        sed -e 's#\.\./shared/#.devbin/shared/#g' \
            -e "/kind = \"noam\"/s/minutes = [0-9.]*/minutes = $tmin/" \
            -e "/^train = { budget = { minutes/s/minutes = [0-9.]*/minutes = $lmin/" \
            experiments/multi30k-gpu.toml > /tmp/multi30k-gpu.toml
        if [ "${MULTI30K_PRECISION:-f32}" = mixed ]; then
          sed -i 's/^\[train\]$/[train]\nprecision = "mixed"/' /tmp/multi30k-gpu.toml
          echo "multi30k trains in mixed precision"
        fi
        # Captured steps are on by default on a GPU (capture = "auto"); should one fail, the
        # runs resume from their checkpoints with every step eager, and the log says so.
        rm -rf /tmp/multi30k-gpu
        if ! timeout $((budget - SECONDS)) "$train_bin" experiment run /tmp/multi30k-gpu.toml --device auto \
          --out /tmp/multi30k-gpu --quiet ${only:+--only "$only"} 2> >(tee "$out/multi30k-stderr.txt" >&2); then
          if grep -q "captured step" "$out/multi30k-stderr.txt" && [ $((budget - SECONDS)) -gt 30 ]; then
            echo "captured steps failed: resuming with capture = off" | tee -a "$out/multi30k-stderr.txt" >&2
            sed -i 's/^\[train\]$/[train]\ncapture = "off"/' /tmp/multi30k-gpu.toml
            timeout $((budget - SECONDS)) "$train_bin" experiment run /tmp/multi30k-gpu.toml --device auto \
              --out /tmp/multi30k-gpu --quiet ${only:+--only "$only"} 2>> "$out/multi30k-stderr.txt" || true
          fi
        fi
        for run in /tmp/multi30k-gpu/*/; do
          [ -d "$run/test" ] || continue
          local name; name=$(basename "$run")
          mkdir -p "$out/multi30k/$name"
          cp "$run"/run.json "$run"/metrics.csv "$out/multi30k/$name/" 2>/dev/null || true
          cp "$run"/test/hypotheses.txt "$run"/test/scores.json "$out/multi30k/$name/" 2>/dev/null || true
        done
        cp /tmp/multi30k-gpu/report.md "$out/multi30k/" 2>/dev/null || true;;
      *) echo "unknown step $w (driver, auto, probe, bench, precision, spirv, products, split, kernels, capture, tasks, multi30k)" >&2; exit 2;;
    esac
  done
  echo "done at ${SECONDS}s"
}

# The whole device call: `run` into a folder of its own, stopped BUDGET + 40 s in at the latest,
# then what it wrote packed as $OUT/results.tgz beside log.txt and the bench tables (the device
# tool brings back at most 8 files).
device() {
  local out=${OUT:?run this on the device machine, where OUT names the folder that comes back}
  local stage=/tmp/gpu-session-out
  rm -rf "$stage"; mkdir -p "$stage"
  OUT=$stage timeout $(( ${BUDGET:-480} + 40 )) "$0" run "$@" || echo "run ended with $?"
  tar czf "$out/results.tgz" -C "$stage" .
  cp "$stage"/log.txt "$stage"/bench-*.md "$stage"/products.md "$stage"/split.md "$out/" 2>/dev/null || true
  ls -la "$out"
}

case "${1:-}" in
  pack) pack;;
  device) shift; device "$@";;
  run) shift; run "$@";;
  *) echo "usage: scripts/gpu-session.sh pack | run|device [driver] [auto] [probe] [bench] [precision] [spirv] [products] [split] [kernels] [capture] [tasks] [multi30k]" >&2; exit 2;;
esac
