#!/bin/sh
# Usage: count.sh FILE... — the number of lines of each FILE
for f in $@; do
  n=$(wc -l < $f)
  echo "$n $f"
done
