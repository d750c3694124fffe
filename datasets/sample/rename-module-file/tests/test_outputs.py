import hashlib
import subprocess
import sys
import unittest
from pathlib import Path

TOOLS = Path("/app/tools")
# The module must be moved, not rewritten: its bytes stay those it started with.
MODULE_SHA256 = "dca696dd75d7b0ce3b6cad5a211d1777d147629e131adbceab2cb073ce4aa362"


class RenamedModuleTest(unittest.TestCase):
    def test_module_has_the_imported_name(self):
        self.assertTrue((TOOLS / "text_tools.py").is_file())

    def test_module_content_is_unchanged(self):
        digest = hashlib.sha256((TOOLS / "text_tools.py").read_bytes()).hexdigest()
        self.assertEqual(digest, MODULE_SHA256)

    def test_old_name_is_gone(self):
        self.assertFalse((TOOLS / "texttools.py").exists())

    def test_main_runs(self):
        result = subprocess.run(
            [sys.executable, "/app/main.py"], capture_output=True, text=True, cwd="/app"
        )
        self.assertEqual(result.stdout, "HELLO!\ngoodbye...\n", result.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
