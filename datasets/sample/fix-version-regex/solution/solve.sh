#!/bin/bash
set -euo pipefail
sed -i 's|VERSION_RE = re.compile(r"^v?(\\d)\\.(\\d)\\.(\\d)$")|VERSION_RE = re.compile(r"^v?(\\d+)\\.(\\d+)\\.(\\d+)$")|' /app/versions.py
grep -qF '(\d+)\.(\d+)\.(\d+)' /app/versions.py
