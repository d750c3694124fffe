#!/bin/bash
# The oracle: reverse the injected bug (this heredoc is environment/bug.patch).
set -euo pipefail
cd /app
patch -p1 -R <<'BUG_PATCH'
--- a/boltons/strutils.py
+++ b/boltons/strutils.py
@@ -907,7 +907,7 @@
         # Range
         if range_delim in x:
             range_limits = list(map(int, x.split(range_delim)))
-            output += list(range(min(range_limits), max(range_limits)+1))
+            output += list(range(min(range_limits), max(range_limits)))
 
         # Empty String
         elif not x:
BUG_PATCH
