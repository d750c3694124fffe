#!/bin/bash
set -euo pipefail
sed -i -e 's/^prot = 8080$/port = 8080/' -e 's/^log_level = verbose$/log_level = info/' /app/service.ini
