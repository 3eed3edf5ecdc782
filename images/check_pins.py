"""Compare the distributions installed in an image (``pip freeze`` lines) with requirements/constraints.txt.

Every installed distribution that constraints.txt pins must have the pinned version; a local version
label (torch's ``+cpu``) is allowed, as the constraint ``torch==2.13.0`` allows it. Prints one line per
mismatch and the number checked; exit status 1 on any mismatch.

Usage: python3 images/check_pins.py CONSTRAINTS FREEZE [LABEL]
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;#]+)")


def canonical(name: str) -> str:
    """PEP 503 normalized name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(text: str) -> dict[str, str]:
    """{normalized name: version} of the ``name==version`` lines of a constraints or freeze file."""
    return {canonical(m.group(1)): m.group(2) for m in map(_PIN.match, text.splitlines()) if m}


def mismatches(constraints: str, freeze: str) -> tuple[int, list[str]]:
    """(distributions checked, one line per installed version that differs from its pin)."""
    pinned, installed = pins(constraints), pins(freeze)
    checked = sorted(set(pinned) & set(installed))
    bad = [
        f"{name}: installed {installed[name]}, pinned {pinned[name]}"
        for name in checked
        if installed[name].split("+", 1)[0] != pinned[name]
    ]
    return len(checked), bad


def main(argv: list[str]) -> int:
    constraints, freeze = Path(argv[0]).read_text(), Path(argv[1]).read_text()
    label = argv[2] if len(argv) > 2 else argv[1]
    checked, bad = mismatches(constraints, freeze)
    unpinned = sorted(set(pins(freeze)) - set(pins(constraints)))
    for line in bad:
        print(f"check_pins: {label}: {line}")
    others = ", ".join(unpinned) or "none"
    print(f"check_pins: {label}: {checked} pinned distributions checked, {len(bad)} differ; not pinned: {others}")
    return 1 if bad or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
