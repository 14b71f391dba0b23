#!/usr/bin/env python3
"""The command blocks of a Markdown file that test_docs.sh runs, and the
file copies it checks.

    docs_blocks.py FILE.md OUT_DIR

writes OUT_DIR/NN.sh for each ```sh block that follows a line
`<!-- runnable -->` (NN in file order, a comment naming FILE:LINE first),
and OUT_DIR/NN.file for each ```yaml / ```toml block that follows
`<!-- file: PATH -->` (its first line the PATH, then the block). Prints the
count of each. A marker before anything but such a block is an error, so a
marker cannot silently stop covering its block.
"""
import os
import re
import sys


def blocks(lines):
    """(marker, line number of the fence, language, body) for each marked block."""
    i = 0
    while i < len(lines):
        marker = re.match(r"^<!-- (runnable|file: (\S+)) -->\s*$", lines[i])
        if not marker:
            i += 1
            continue
        fence = re.match(r"^```(\w*)\s*$", lines[i + 1]) if i + 1 < len(lines) else None
        if not fence:
            raise SystemExit(f"line {i + 1}: '{lines[i].strip()}' is not followed by a ``` block")
        end = i + 2
        while end < len(lines) and not lines[end].startswith("```"):
            end += 1
        if end == len(lines):
            raise SystemExit(f"line {i + 2}: the block never closes")
        yield marker, i + 2, fence.group(1), lines[i + 2:end]
        i = end + 1


def main():
    path, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    lines = open(path, encoding="utf-8").read().split("\n")
    runnable = files = 0
    for n, (marker, line, lang, body) in enumerate(blocks(lines)):
        if marker.group(1) == "runnable":
            if lang not in ("sh", "bash"):
                raise SystemExit(f"{path}:{line}: a runnable block must be ```sh, not ```{lang}")
            with open(os.path.join(out, f"{n:02d}.sh"), "w", encoding="utf-8") as f:
                f.write(f"# {path}:{line}\n" + "\n".join(body) + "\n")
            runnable += 1
        else:
            with open(os.path.join(out, f"{n:02d}.file"), "w", encoding="utf-8") as f:
                f.write(marker.group(2) + "\n" + "\n".join(body) + "\n")
            files += 1
    print(runnable, files)


if __name__ == "__main__":
    main()
