#!/bin/bash
set -euo pipefail
printf '%s\n' red > /app/answer.txt
