import csv
import unittest
from pathlib import Path

DATA = Path("/app/data")

ORIGINAL = [
    ["name", "team", "score"],
    ["Grace", "blue", "95"],
    ["Alan", "red", "100"],
    ["Edsger", "green", "9"],
    ["Barbara", "red", "87"],
    ["Ada", "blue", "95"],
    ["Donald", "green", "42"],
    ["Margaret", "blue", "100"],
    ["Ken", "red", "87"],
]

RANKED = [
    ["name", "team", "score"],
    ["Alan", "red", "100"],
    ["Margaret", "blue", "100"],
    ["Ada", "blue", "95"],
    ["Grace", "blue", "95"],
    ["Barbara", "red", "87"],
    ["Ken", "red", "87"],
    ["Donald", "green", "42"],
    ["Edsger", "green", "9"],
]


def read_rows(path: Path) -> list[list[str]]:
    with path.open(newline="") as handle:
        return [row for row in csv.reader(handle) if row]


class RankedCsvTest(unittest.TestCase):
    def test_ranked_file_exists(self):
        self.assertTrue((DATA / "ranked.csv").is_file())

    def test_rows_sorted_by_score_then_name(self):
        self.assertEqual(read_rows(DATA / "ranked.csv"), RANKED)

    def test_scores_file_unchanged(self):
        self.assertEqual(read_rows(DATA / "scores.csv"), ORIGINAL)


if __name__ == "__main__":
    unittest.main(verbosity=2)
