"""Not a library: this file only makes pytest import ``notebooks/conftest.py`` as
``notebooks.conftest``, so it cannot shadow ``tests/conftest.py``, which tests import as
``conftest``."""
