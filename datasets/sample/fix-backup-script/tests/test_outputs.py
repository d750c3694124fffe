import subprocess
import tempfile
import unittest
from pathlib import Path

NOTES = {
    "todo.txt": "Ship the CSV export.\n",
    "meeting notes.txt": "Agenda: pricing, hiring.\n",
    "a  b   c.txt": "Spaced out.\n",
    "plain.txt": "Nothing special.\n",
}
OTHER_FILES = {"draft.md": "# not a note\n", "image.png": "png"}


def run_backup(source: Path, dest: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "/app/backup.sh", str(source), str(dest)], capture_output=True, text=True
    )


def write_files(directory: Path, files: dict[str, str]) -> None:
    directory.mkdir(parents=True)
    for name, text in files.items():
        (directory / name).write_text(text)


class BackupScriptTest(unittest.TestCase):
    def setUp(self):
        self.work = Path(self.enterContext(tempfile.TemporaryDirectory()))
        self.source = self.work / "my notes"
        write_files(self.source, {**NOTES, **OTHER_FILES})

    def assert_backed_up(self, dest: Path, result: subprocess.CompletedProcess):
        self.assertEqual(result.returncode, 0, result.stderr)
        copied = {path.name: path.read_text() for path in dest.iterdir()}
        self.assertEqual(copied, NOTES)

    def test_copies_every_note_into_new_directory(self):
        dest = self.work / "backup"
        self.assert_backed_up(dest, run_backup(self.source, dest))

    def test_destination_path_with_spaces(self):
        dest = self.work / "nightly backup" / "today"
        self.assert_backed_up(dest, run_backup(self.source, dest))

    def test_sources_are_left_in_place(self):
        run_backup(self.source, self.work / "backup")
        self.assertEqual(len(list(self.source.iterdir())), len(NOTES) + len(OTHER_FILES))


if __name__ == "__main__":
    unittest.main(verbosity=2)
