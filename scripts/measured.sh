# Sourced by the measuring scripts (bench-vs-torch.sh, decode-bench.sh) for the header of the
# tables they write into docs/benchmarks.md.

# The commit measured: HEAD, with "+changes" where crates/ or scripts/ differ from it; where git
# is absent (the GPU machine), the commit `gpu-session.sh pack` recorded.
measured_commit() {
  local commit
  if commit=$(git rev-parse --short HEAD 2> /dev/null); then
    git diff --quiet HEAD -- crates scripts || commit+="+changes"
  else
    commit=$(cut -c1-7 .devbin/commit 2> /dev/null || echo unknown)
  fi
  echo "$commit"
}

# The arguments as typed, those with spaces quoted.
typed() {
  local out= a
  for a in "$@"; do case "$a" in *' '*) out+=" \"$a\"";; *) out+=" $a";; esac; done
  echo "${out# }"
}
