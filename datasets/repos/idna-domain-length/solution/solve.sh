#!/bin/bash
# The oracle: reverse the injected bug (this heredoc is environment/bug.patch).
set -euo pipefail
cd /app
patch -p1 -R <<'BUG_PATCH'
--- a/idna/core.py
+++ b/idna/core.py
@@ -791,7 +791,7 @@
     if trailing_dot:
         result.append(b"")
     s = b".".join(result)
-    if not valid_string_length(s, trailing_dot):
+    if not valid_string_length(s, trailing_dot=True):
         raise IDNAError("Domain too long", code="domain_too_long")
     return s
 
BUG_PATCH
