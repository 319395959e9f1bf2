#!/usr/bin/env bash
# Fetch Multi30k task 1 (de–en; raw, cased, untokenized) into DIR (default: data/multi30k):
# train.{de,en}, val.{de,en}, test2016.{de,en}. Source: the multi30k/dataset repository.
# Terms: Flickr30K-derived; non-commercial research and education; cite Elliott et al. (2016).
set -euo pipefail
dir="${1:-data/multi30k}"
base="https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw"
mkdir -p "$dir"
for split in train val test_2016_flickr; do
  for lang in de en; do
    out="$dir/${split/test_2016_flickr/test2016}.$lang"
    echo "fetching $out"
    curl -fsSL "$base/$split.$lang.gz" | gunzip > "$out.tmp"
    mv "$out.tmp" "$out"
  done
done
wc -l "$dir"/*
