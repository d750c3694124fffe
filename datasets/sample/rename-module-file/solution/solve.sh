#!/bin/bash
set -euo pipefail
mv /app/tools/texttools.py /app/tools/text_tools.py
