import inspect
import subprocess
import sys
import unittest

sys.path.insert(0, "/app")

from greetings import greet


class GreetTest(unittest.TestCase):
    def test_greeting_defaults_to_hello(self):
        self.assertEqual(greet("Ada"), "Hello, Ada!")

    def test_explicit_greeting_still_used(self):
        self.assertEqual(greet("Ada", "Hi"), "Hi, Ada!")
        self.assertEqual(greet(name="Bo", greeting="Hey"), "Hey, Bo!")

    def test_signature_declares_the_default(self):
        parameter = inspect.signature(greet).parameters["greeting"]
        self.assertEqual(parameter.default, "Hello")

    def test_welcome_script_runs(self):
        result = subprocess.run(
            [sys.executable, "/app/welcome.py"], capture_output=True, text=True, cwd="/app"
        )
        self.assertEqual(
            result.stdout, "Hello, Ada!\nHello, Grace!\nGood evening, Alan!\n", result.stderr
        )


if __name__ == "__main__":
    unittest.main(verbosity=2)
