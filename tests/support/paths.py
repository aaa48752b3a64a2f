"""Where the tests find the repository and their data, wherever a test module sits."""

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent  # the repository: workers started there import trainready and tests.*
DATA = TESTS / "data"
SUPPORT = TESTS / "support"
