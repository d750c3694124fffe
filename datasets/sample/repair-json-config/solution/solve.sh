#!/bin/bash
set -euo pipefail
sed -i \
  -e 's|"https://admin.example.com",$|"https://admin.example.com"|' \
  -e "s|'name': \"inventory\"|\"name\": \"inventory\"|" \
  /app/config/settings.json
