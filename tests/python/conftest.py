"""Shared fixtures: a numpy generator with a fresh seed that the test
prints (TOPS_TEST_SEED replays it)."""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture
def rng(request):
    env = os.environ.get("TOPS_TEST_SEED")
    seed = int(env, 0) if env else int.from_bytes(os.urandom(4), "little")
    print(f"{request.node.name}: seed {seed} (TOPS_TEST_SEED to replay)")
    return np.random.default_rng(seed)
