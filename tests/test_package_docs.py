"""The usage example in each package docstring runs as written."""

import doctest
import importlib

import pytest


@pytest.mark.parametrize("package", ["ledger", "contracts", "committee"])
def test_package_docstring_example_runs(package):
    module = importlib.import_module(package)
    result = doctest.testmod(module, verbose=False, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
