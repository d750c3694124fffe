import subprocess
import sys
import unittest

sys.path.insert(0, "/app")

from load_config import load


class ServiceSettingsTest(unittest.TestCase):
    def test_loader_accepts_the_file(self):
        result = subprocess.run(
            [sys.executable, "/app/load_config.py"], capture_output=True, text=True
        )
        self.assertEqual(result.stdout.strip(), "ok", result.stderr)

    def test_requested_values(self):
        settings = load()
        self.assertEqual(settings["port"], 8080)
        self.assertEqual(settings["log_level"], "info")

    def test_other_settings_unchanged(self):
        settings = load()
        self.assertEqual(
            (settings["host"], settings["workers"]),
            ("0.0.0.0", 4),
        )
        self.assertEqual(
            (settings["storage_path"], settings["retention_days"]),
            ("/var/lib/inventory", 30),
        )


if __name__ == "__main__":
    unittest.main(verbosity=2)
