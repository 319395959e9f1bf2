#!/usr/bin/env bash
# The GPU measurements (speed beside PyTorch on the same GPU) in as few device calls as
# possible, for a session that is lent a GPU machine. That machine
# reaches nothing outside, has PyTorch but no Vulkan loader and no Rust, so the binary is built
# here and carried with the loader's packages.
#
#   here:   scripts/gpu-session.sh pack
#           builds `s2s` (release, default features), writes .devbin/ (the stripped binary,
#           xz-packed, and ../shared/bench) and .gl/ (Debian's Vulkan loader packages), and
#           lists both in .git/info/exclude so they are never committed.
#   there:  device run, carry [".gl", ".devbin"], command `scripts/gpu-session.sh run [WHAT]`
#           WHAT, any of (default `bench tasks`):
#             bench  scripts/bench-vs-torch.sh --device wgpu --steps 20 --rounds 2 against
#                    PyTorch on CUDA: $OUT/bench-vs-torch.md and the raw JSON lines
#             tasks  `s2s bench --device wgpu` with cubecl-wgpu's CUBECL_WGPU_MAX_TASKS at
#                    32 (its default), 128 and 512: $OUT/max-tasks.jsonl
#             auto   what `--device auto` picks: $OUT/auto.txt
#           Every step's output also goes to $OUT/log.txt; the machine's description to env.txt.
# Steps and models can be narrowed for a try-out: STEPS=2 MODELS=lstm scripts/gpu-session.sh run
# runs on any machine with a Vulkan driver (lavapipe too) and python3 with torch; TORCH_DEVICE
# (default cuda) names PyTorch's device.
set -euo pipefail
cd "$(dirname "$0")/.."

pack() {
  local target=${CARGO_TARGET_DIR:-target}
  cargo build --release -p s2s
  mkdir -p .devbin/shared .gl .git/info
  for d in /.devbin/ /.gl/; do
    grep -qxF "$d" .git/info/exclude 2>/dev/null || echo "$d" >> .git/info/exclude
  done
  strip -o .devbin/s2s "$target/release/s2s"
  xz -f -T2 .devbin/s2s
  rm -rf .devbin/shared/bench
  cp -r "${S2S_SHARED:-../shared}/bench" .devbin/shared/bench
  git rev-parse HEAD > .devbin/commit
  if ! ls .gl/libvulkan1_*.deb >/dev/null 2>&1; then
    local o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
    mkdir -p /tmp/amd64/partial
    # shellcheck disable=SC2086
    apt-get $o update -qq && (cd .gl && apt-get $o download libvulkan1)
  fi
  du -sh .devbin .gl
}

run() {
  local out=${OUT:?run this on the device machine, where OUT names the folder that comes back}
  local what=${*:-bench tasks} steps=${STEPS:-20} models=${MODELS:-lstm,bahdanau,luong,transformer}
  exec > >(tee -a "$out/log.txt") 2>&1
  # The Vulkan loader, where the machine lacks one (the GPU machines do); never over one it has.
  if ! ldconfig -p | grep -q 'libvulkan.so.1'; then
    for f in .gl/*.deb; do dpkg -x "$f" /; done
    ldconfig
  fi
  local icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
  [ -f "$icd" ] && export VK_DRIVER_FILES=$icd
  export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-$(mktemp -d)}
  local bin=/tmp/s2s-gpu-session
  xz -dc .devbin/s2s.xz > "$bin" && chmod +x "$bin"
  {
    echo "commit $(cat .devbin/commit 2>/dev/null || echo unknown), $(date -u +%FT%TZ)"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available())' 2>/dev/null || echo "no torch"
    nproc
  } | tee "$out/env.txt"
  for w in $what; do
    echo "== $w"
    case $w in
      auto)
        "$bin" bench --device auto --steps 1 --models lstm --json 2>&1 >/dev/null | grep -i device | tee "$out/auto.txt";;
      bench)
        S2S_SHARED=.devbin/shared S2S_BIN=$bin TORCH_DEVICE=${TORCH_DEVICE:-cuda} KEEP_JSON=$out \
          scripts/bench-vs-torch.sh --device wgpu --steps "$steps" --rounds 2 --models "$models" \
          | tee "$out/bench-vs-torch.md";;
      tasks)
        for tasks in 32 128 512; do
          for m in ${models//,/ }; do
            CUBECL_WGPU_MAX_TASKS=$tasks "$bin" bench --device wgpu --steps "$steps" --models "$m" --json \
              | sed "s/^{/{\"max_tasks\":$tasks,/" | tee -a "$out/max-tasks.jsonl"
          done
        done;;
      *) echo "unknown step $w (bench, tasks, auto)" >&2; exit 2;;
    esac
  done
}

case "${1:-}" in
  pack) pack;;
  run) shift; run "$@";;
  *) echo "usage: scripts/gpu-session.sh pack | run [bench] [tasks] [auto]" >&2; exit 2;;
esac
