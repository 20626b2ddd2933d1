# SPDX-License-Identifier: BSD-3-Clause
"""Line and function coverage of src/backends/gpu from the gcov data of the host-built GPU module
(`make coverage-gpu`): usage gpu_coverage.py OBJDIR SRCDIR. A line counts as run when any
translation unit ran it (the headers are compiled into several); a function when any ran it.
Prints one line per file, the total, and every function or line never run."""
import json
import os
import subprocess
import sys


def main():
    objdir, srcdir = os.path.abspath(sys.argv[1]), os.path.realpath(sys.argv[2])
    gpu = os.path.join(srcdir, "src", "backends", "gpu") + os.sep
    lines, funcs = {}, {}
    for obj in sorted(f for f in os.listdir(objdir) if f.endswith(".gcno")):
        out = subprocess.run(["gcov", "--json-format", "--stdout", "-o", objdir, os.path.join(objdir, obj)],
                             check=True, capture_output=True, cwd=objdir).stdout
        for line in out.splitlines():
            if not line.strip():
                continue
            doc = json.loads(line)
            for f in doc["files"]:
                path = os.path.realpath(os.path.join(doc["current_working_directory"], f["file"]))
                if not path.startswith(gpu):
                    continue
                name = path[len(srcdir) + 1:]
                for ln in f["lines"]:
                    key = (name, ln["line_number"])
                    lines[key] = lines.get(key, 0) + ln["count"]
                for fn in f["functions"]:
                    key = (name, fn["demangled_name"], fn["start_line"])
                    funcs[key] = funcs.get(key, 0) + fn["execution_count"]
    if not lines:
        sys.exit(f"no coverage data for {gpu} in {objdir}")
    total = run = 0
    for name in sorted({k[0] for k in lines}):
        mine = [c for (f, _), c in lines.items() if f == name]
        ran = sum(1 for c in mine if c > 0)
        total += len(mine)
        run += ran
        print(f"{name}: {ran}/{len(mine)} lines ({100.0 * ran / len(mine):.1f} %)")
    fn_run = sum(1 for c in funcs.values() if c > 0)
    print(f"TOTAL src/backends/gpu: {run}/{total} lines ({100.0 * run / total:.1f} %), "
          f"{fn_run}/{len(funcs)} functions")
    for (name, fn, line), c in sorted(funcs.items()):
        if c == 0:
            print(f"function never run: {name}:{line} {fn}")
    for (name, line), c in sorted(lines.items()):
        if c == 0:
            print(f"line never run: {name}:{line}")


if __name__ == "__main__":
    main()
