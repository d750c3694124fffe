import tomllib
import unittest
from pathlib import Path

DEPLOY = Path("/app/deploy.toml")

EXPECTED = {
    "service": {
        "name": "inventory",
        "image": "registry.example.com/inventory:0.3.0",
        "replicas": 3,
        "regions": ["eu-west-1", "us-east-1"],
        "env": {"LOG_LEVEL": "info", "MAX_ITEMS": 500},
    },
    "healthcheck": {"path": "/healthz", "interval_sec": 10},
}


class DeploySettingsTest(unittest.TestCase):
    def test_file_parses_as_toml(self):
        tomllib.loads(DEPLOY.read_text())

    def test_values_are_unchanged(self):
        self.assertEqual(tomllib.loads(DEPLOY.read_text()), EXPECTED)


if __name__ == "__main__":
    unittest.main(verbosity=2)
