#!/bin/bash
set -euo pipefail
sed -i 's|return celsius \* 9 / 5 - 32|return celsius * 9 / 5 + 32|' /app/convert.py
