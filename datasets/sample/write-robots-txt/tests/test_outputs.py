import hashlib
import unittest
from pathlib import Path

PUBLIC = Path("/app/public")
EXPECTED = (
    "User-agent: *\n"
    "Disallow: /admin/\n"
    "Disallow: /cart/\n"
    "Sitemap: https://shop.example.com/sitemap.xml\n"
)
INDEX_SHA256 = "de490332635ab3d399558448f14c7979eea755d4ed4eacacf5e96d532f0f6634"


class RobotsTxtTest(unittest.TestCase):
    def test_robots_txt_exists(self):
        self.assertTrue((PUBLIC / "robots.txt").is_file())

    def test_robots_txt_has_exact_content(self):
        self.assertEqual((PUBLIC / "robots.txt").read_bytes().decode(), EXPECTED)

    def test_public_directory_holds_only_the_two_files(self):
        self.assertEqual(sorted(p.name for p in PUBLIC.iterdir()), ["index.html", "robots.txt"])

    def test_index_page_unchanged(self):
        digest = hashlib.sha256((PUBLIC / "index.html").read_bytes()).hexdigest()
        self.assertEqual(digest, INDEX_SHA256)


if __name__ == "__main__":
    unittest.main(verbosity=2)
