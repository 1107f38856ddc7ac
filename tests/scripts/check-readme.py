#!/usr/bin/env python3
"""The README's C example is docs/examples/readme.c (which the build
compiles), minus that file's leading comment: exit 1, with a diff, if the
two differ."""
import difflib
import os
import re
import sys

root = os.environ.get("RCP_SOURCE_ROOT") or os.path.join(os.path.dirname(__file__), "..", "..")
readme = open(os.path.join(root, "README.md")).read()
src = open(os.path.join(root, "docs", "examples", "readme.c")).read()
m = re.search(r"## Example\n.*?```c\n(.*?)```\n", readme, re.S)
if not m:
    print("README.md has no ```c block under '## Example'")
    sys.exit(1)
body = re.sub(r"\A/\*.*?\*/\n", "", src, flags=re.S)
if m.group(1) != body:
    sys.stdout.writelines(difflib.unified_diff(body.splitlines(True), m.group(1).splitlines(True),
                                               "docs/examples/readme.c", "README.md"))
    sys.exit(1)
print("README example == docs/examples/readme.c")
