"""The first lines of a test run name the versions of the pinned test
packages (scripts/requirements-test.txt) as installed, and say which differ
from the pins (also under -q, which hides pytest's own header)."""
import os
from importlib import metadata

REQ = os.path.join(os.path.dirname(__file__), "../../scripts/requirements-test.txt")


def pinned_lines():
    pins = {}
    with open(REQ) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                name, _, version = line.partition("==")
                pins[name] = version
    have, off = [], []
    for name, want in pins.items():
        try:
            got = metadata.version(name)
        except metadata.PackageNotFoundError:
            got = "missing"
        have.append(f"{name}=={got}")
        if got != want:
            off.append(f"{name} {got} (pinned {want})")
    lines = ["pinned test packages: " + " ".join(have)]
    if off:
        lines.append("NOT THE PINNED VERSIONS (verdicts may differ): " + ", ".join(off))
    return lines


def pytest_sessionstart(session):
    tr = session.config.pluginmanager.get_plugin("terminalreporter")
    if tr is not None:
        for line in pinned_lines():
            tr.write_line(line)
