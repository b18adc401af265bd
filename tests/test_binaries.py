"""Lists the test binaries of a `cargo test --no-run --message-format=json` build.

Reads cargo's JSON messages on stdin and prints one line per test binary, tab-separated: a
name for the log (package and target), the package's directory (cargo runs a test binary from
there) and the executable. The largest binary comes first, so it starts first.
"""

import json
import os
import sys


def main() -> None:
    binaries = []
    for line in sys.stdin:
        try:
            message = json.loads(line)
        except json.JSONDecodeError:
            continue
        if message.get("reason") != "compiler-artifact":
            continue
        executable = message.get("executable")
        if not executable or not message.get("profile", {}).get("test"):
            continue
        target = message["target"]
        directory = os.path.dirname(message["manifest_path"])
        # e.g. "shared: test it", "functions/cli: bin ourios-compact"
        name = f"{os.path.relpath(directory)}: {target['kind'][0]} {target['name']}"
        binaries.append((os.path.getsize(executable), name, directory, executable))
    for _, name, directory, executable in sorted(binaries, reverse=True):
        print(f"{name}\t{directory}\t{executable}")


if __name__ == "__main__":
    main()
