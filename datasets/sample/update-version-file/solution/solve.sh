#!/bin/bash
set -euo pipefail
grep -m1 -oE '^## [0-9]+\.[0-9]+\.[0-9]+' /app/CHANGELOG.md | cut -d' ' -f2 > /app/VERSION
