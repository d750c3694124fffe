#!/bin/bash
# The oracle: reverse the injected bug (this heredoc is environment/bug.patch).
set -euo pipefail
cd /app
patch -p1 -R <<'BUG_PATCH'
--- a/more_itertools/more.py
+++ b/more_itertools/more.py
@@ -1071,7 +1071,7 @@
 
     # Create the filler for the next windows. The padding ensures
     # we have just enough elements to fill the last window.
-    padding = (fillvalue,) * (n - 1 if step >= n else step - 1)
+    padding = (fillvalue,) * (step - 1)
     filler = map(window.append, chain(iterator, padding))
 
     # Generate the rest of the windows
BUG_PATCH
