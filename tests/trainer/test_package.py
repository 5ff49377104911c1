"""The trainer package docstring example runs, and importing the package does not load torch."""

import doctest
import subprocess
import sys

import trainer


def test_package_docstring_example_runs():
    result = doctest.testmod(trainer, verbose=False)
    assert result.attempted > 0 and result.failed == 0


def test_import_does_not_load_torch():
    code = "import sys, trainer, trainer.cli; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
