#!/usr/bin/env bash
# Validates the SPIR-V that cubecl compiles for a run with `spirv-val` (spirv-tools), kernel by
# kernel: which of the kernels a training step launches are valid SPIR-V, and where the first
# invalid one fails. Needs a build with the `spirv` feature and a Vulkan adapter that takes
# cubecl's SPIR-V path (lavapipe does: `wgpu<spirv>` in the device line).
#   scripts/spirv-check.sh [--icd FILE] [--models lstm] [--keep DIR]
# S2S_BIN names the binary (default: `cargo build --release -p s2s --features spirv`'s).
# --icd sets VK_ICD_FILENAMES (e.g. a newer Mesa's lavapipe unpacked elsewhere, with its
# directory on LD_LIBRARY_PATH). The run may crash in the driver; the kernels compiled until
# then are checked. Exit status 1 when any kernel is invalid.
set -euo pipefail
cd "$(dirname "$0")/.."
models=lstm; keep=""
while [ $# -gt 0 ]; do
  case "$1" in
    --icd) export VK_ICD_FILENAMES=$2; shift 2;;
    --models) models=$2; shift 2;;
    --keep) keep=$2; shift 2;;
    *) echo "unknown option $1" >&2; exit 2;;
  esac
done
command -v spirv-val > /dev/null || { echo "needs spirv-tools (apt-get install spirv-tools)" >&2; exit 2; }
if [ -z "${S2S_BIN:-}" ]; then
  cargo build --release -p s2s --features spirv 2>&1 | tail -1 >&2
  # The binary the last build linked (cargo keeps one per feature set under deps/).
  S2S_BIN=$(cargo build --release -p s2s --features spirv --message-format=json 2> /dev/null \
    | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable"): print(m["executable"])' | tail -1)
fi
dir=${keep:-$(mktemp -d)}; mkdir -p "$dir"
[ -n "$keep" ] || trap 'rm -rf "$dir"' EXIT
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp/xdg-$(id -u)}; mkdir -p "$XDG_RUNTIME_DIR"
set +e
CUBECL_DEBUG_LOG="$dir/cubecl.log" "$S2S_BIN" bench --device wgpu \
  --shapes experiments/bench/launch-bound.json --models "$models" --steps 1 --no-decode \
  > "$dir/run.out" 2>&1
rc=$?
set -e
grep -m1 '^device:' "$dir/run.out" >&2 || true
[ "$rc" -eq 0 ] || echo "the run ended with status $rc (139: segfault) after the kernels below" >&2
grep -q 'wgpu<spirv>' "$dir/run.out" || { echo "the adapter did not take the SPIR-V path" >&2; exit 2; }
# One file per compiled kernel: its name's first line and its `spirv` source block.
python3 - "$dir" <<'EOF'
import pathlib, re, sys
d = pathlib.Path(sys.argv[1])
text = d.joinpath("cubecl.log").read_text(errors="replace")
for i, block in enumerate(text.split("[START_KERNEL_COMPILATION]")[1:]):
    name = re.search(r"name: ([^\n<]+)", block).group(1).strip()
    src = re.search(r"```spirv\n(.*?)```", block, re.S)
    if src:
        d.joinpath(f"k{i:03d}.spvasm").write_text(src.group(1))
        d.joinpath(f"k{i:03d}.name").write_text(name.split("::")[-1] + "  (" + name + ")")
EOF
bad=0
echo "| kernel | spirv-val |"
echo "|---|---|"
for f in "$dir"/k*.spvasm; do
  [ -e "$f" ] || continue
  name=$(cut -d' ' -f1 < "${f%.spvasm}.name")
  if ! msg=$(spirv-as --target-env vulkan1.3 "$f" -o "${f%.spvasm}.spv" 2>&1) \
     || ! msg=$(spirv-val --target-env vulkan1.3 "${f%.spvasm}.spv" 2>&1); then
    echo "| $name | invalid: $(echo "$msg" | head -1 | sed 's/^error: //') |"; bad=1
  else
    echo "| $name | valid |"
  fi
done
[ -n "$keep" ] && echo "kernels and log kept in $dir" >&2
exit $bad
