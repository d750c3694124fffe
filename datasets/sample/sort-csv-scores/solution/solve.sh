#!/bin/bash
set -euo pipefail
cd /app/data
{
  head -n 1 scores.csv
  tail -n +2 scores.csv | sort -t, -k3,3nr -k1,1
} > ranked.csv
