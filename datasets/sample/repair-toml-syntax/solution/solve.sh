#!/bin/bash
set -euo pipefail
sed -i \
  -e 's|^LOG_LEVEL = info$|LOG_LEVEL = "info"|' \
  -e 's|^path = /healthz$|path = "/healthz"|' \
  /app/deploy.toml
