import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, "/app")

from report import summarize


class ReportTest(unittest.TestCase):
    def test_summary_of_even_count(self):
        self.assertEqual(summarize([1.0, 2.0, 3.0, 10.0]), "n=4 mean=4.00 median=2.50")

    def test_summary_of_single_value(self):
        self.assertEqual(summarize([7.5]), "n=1 mean=7.50 median=7.50")

    def test_report_on_a_file(self):
        with tempfile.NamedTemporaryFile("w", suffix=".txt") as numbers:
            numbers.write("3\n8\n1\n\n12\n6\n")
            numbers.flush()
            result = subprocess.run(
                [sys.executable, "/app/report.py", numbers.name], capture_output=True, text=True
            )
        self.assertEqual(result.stdout, "n=5 mean=6.00 median=6.00\n", result.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
