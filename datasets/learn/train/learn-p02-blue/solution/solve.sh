#!/bin/bash
set -euo pipefail
printf '%s\n' blue > /app/answer.txt
