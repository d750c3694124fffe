#!/bin/bash
# The oracle: reverse the injected bug (this heredoc is environment/bug.patch).
set -euo pipefail
cd /app
patch -p1 -R <<'BUG_PATCH'
--- a/src/isodate/duration.py
+++ b/src/isodate/duration.py
@@ -34,7 +34,7 @@
         return 31
     if month in (4, 6, 9, 11):
         return 30
-    if ((year % 400) == 0) or ((year % 100) != 0) and ((year % 4) == 0):
+    if ((year % 100) != 0) and ((year % 4) == 0):
         return 29
     return 28
 
BUG_PATCH
