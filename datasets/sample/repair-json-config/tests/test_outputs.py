import json
import unittest
from pathlib import Path

SETTINGS = Path("/app/config/settings.json")

EXPECTED = {
    "service": "inventory",
    "port": 8080,
    "debug": False,
    "allowed_origins": ["https://shop.example.com", "https://admin.example.com"],
    "database": {"host": "db.internal", "port": 5432, "name": "inventory"},
}


class SettingsFileTest(unittest.TestCase):
    def test_file_is_valid_json(self):
        json.loads(SETTINGS.read_text())

    def test_settings_are_unchanged(self):
        self.assertEqual(json.loads(SETTINGS.read_text()), EXPECTED)

    def test_value_types_are_preserved(self):
        settings = json.loads(SETTINGS.read_text())
        self.assertIs(type(settings["port"]), int)
        self.assertIs(settings["debug"], False)


if __name__ == "__main__":
    unittest.main(verbosity=2)
