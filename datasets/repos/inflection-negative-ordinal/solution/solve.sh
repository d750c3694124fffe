#!/bin/bash
# The oracle: reverse the injected bug (this heredoc is environment/bug.patch).
set -euo pipefail
cd /app
patch -p1 -R <<'BUG_PATCH'
--- a/inflection/__init__.py
+++ b/inflection/__init__.py
@@ -222,7 +222,7 @@
         'st'
 
     """
-    number = abs(int(number))
+    number = int(number)
     if number % 100 in (11, 12, 13):
         return "th"
     else:
BUG_PATCH
