#!/usr/bin/env python3
"""Prints one closing line 'N passed, N failed' over meson test logs (JSON lines); exits 1 on
any failure. Used by tools/setup.sh test so CI sees a plain summary."""
import json
import sys

passed = failed = skipped = 0
for path in sys.argv[1:]:
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            res = r.get("result")
            if res in ("OK", "EXPECTEDFAIL"):
                passed += 1
            elif res == "SKIP":
                skipped += 1
            else:
                failed += 1
print(f"tests: {passed} passed, {failed} failed, {skipped} skipped")
sys.exit(1 if failed or passed == 0 else 0)
