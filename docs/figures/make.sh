#!/usr/bin/env bash
# Regenerate the PNGs of docs/figures/ that the README and the docs show, with the
# commands named here at their default sizes (seeded, so the numbers are the same on a
# rerun). About 10-15 minutes on 2 CPU cores, most of it compilation and thm2; a second
# run reuses the compilation cache. Run from anywhere: bash docs/figures/make.sh
#
#   demo.png             gflow demo
#   thm1.png             gflow reproduce thm1      (thm1.png)
#   thm2.png             gflow reproduce thm2      (thm2_rank.png)
#   thm3.png             gflow reproduce thm3      (thm3_probability.png)
#   thm3_angles.png      gflow reproduce thm3      (thm3_angles.png)
#   authors.png          gflow reproduce authors   (authors_stable_rank.png)
#   authors_example.png  gflow reproduce authors   (authors_example.png)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

gflow demo --out "$work/demo"
cp "$work/demo/demo.png" "$here/demo.png"

gflow reproduce thm1 --out "$work/thm1"
cp "$work/thm1/thm1.png" "$here/thm1.png"

gflow reproduce thm2 --out "$work/thm2"
cp "$work/thm2/thm2_rank.png" "$here/thm2.png"

gflow reproduce thm3 --out "$work/thm3"
cp "$work/thm3/thm3_probability.png" "$here/thm3.png"
cp "$work/thm3/thm3_angles.png" "$here/thm3_angles.png"

gflow reproduce authors --out "$work/authors"
cp "$work/authors/authors_stable_rank.png" "$here/authors.png"
cp "$work/authors/authors_example.png" "$here/authors_example.png"

ls -l "$here"/*.png
