"""The Python package's tests (ctest python.package): they import tensorops
as pip installed it (make python-package), and take their oracles from the
oracle tests one folder up (test_oracle_blocks.py: numpy implementations of
FORMATS.md's rules), whose ctypes helper is pointed at the installed
package's own library."""
import importlib.util
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ORACLES = os.path.dirname(HERE)
SOURCE_ROOT = os.path.dirname(os.path.dirname(ORACLES))

try:
    import tensorops  # noqa: E402
except ImportError as e:  # pragma: no cover - a missing install is the whole failure
    raise ImportError(f"tensorops is not installed in this Python ({sys.executable}): run `make python-package` "
                      f"(make test does) or `pip install .` ({e})") from e

os.environ.setdefault("TOPS_LIB", tensorops._lib.PATH)
sys.path.insert(0, ORACLES)


def _pins():
    spec = importlib.util.spec_from_file_location("tops_pins", os.path.join(ORACLES, "conftest.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.pinned_lines()


def pytest_sessionstart(session):
    tr = session.config.pluginmanager.get_plugin("terminalreporter")
    if tr is not None:
        for line in _pins():
            tr.write_line(line)
        tr.write_line(f"tensorops {tensorops.__version__} from {os.path.dirname(tensorops.__file__)}")


@pytest.fixture
def rng(request):
    """A numpy generator with a fresh seed, printed (TOPS_TEST_SEED replays it)."""
    import numpy as np
    env = os.environ.get("TOPS_TEST_SEED")
    seed = int(env, 0) if env else int.from_bytes(os.urandom(4), "little")
    print(f"{request.node.name}: seed {seed} (TOPS_TEST_SEED to replay)")
    return np.random.default_rng(seed)
