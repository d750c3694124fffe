#!/bin/bash
# The oracle: reverse the injected bug (this heredoc is environment/bug.patch).
set -euo pipefail
cd /app
patch -p1 -R <<'BUG_PATCH'
--- a/src/cachetools/__init__.py
+++ b/src/cachetools/__init__.py
@@ -575,7 +575,6 @@
             link = links[key]
         except KeyError:
             return cache_getitem(self, key)
-        links.move_to_end(key)
         if self.timer() < link.expires:
             return cache_getitem(self, key)
         else:
BUG_PATCH
