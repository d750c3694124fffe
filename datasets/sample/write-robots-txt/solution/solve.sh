#!/bin/bash
set -euo pipefail
cat > /app/public/robots.txt <<'TXT'
User-agent: *
Disallow: /admin/
Disallow: /cart/
Sitemap: https://shop.example.com/sitemap.xml
TXT
