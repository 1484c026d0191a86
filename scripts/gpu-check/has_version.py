#!/usr/bin/env python3
"""has_version.py DIST MIN: exit 0 when this Python has distribution DIST at version >= MIN
(numeric release parts compared, e.g. 4.16.0 >= 4.13), 1 otherwise. Part of scripts/gpu-check.sh:
whether the image's typing-extensions satisfies apache-tvm-ffi's requirement."""
import importlib.metadata
import re
import sys


def release(version):
    m = re.match(r"\d+(\.\d+)*", version)
    return tuple(int(x) for x in m.group(0).split(".")) if m else ()


def main(argv):
    if len(argv) != 2:
        print(__doc__.splitlines()[0], file=sys.stderr)
        return 2
    dist, minimum = argv
    try:
        have = importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        print(f"{dist}: not installed")
        return 1
    ok = release(have) >= release(minimum)
    print(f"{dist} {have} {'>=' if ok else '<'} {minimum}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
