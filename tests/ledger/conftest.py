"""Ledger tests' shared helpers live in `ledger_helpers`."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # `ledger_helpers`
