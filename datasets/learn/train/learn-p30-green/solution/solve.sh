#!/bin/bash
set -euo pipefail
printf '%s\n' green > /app/answer.txt
