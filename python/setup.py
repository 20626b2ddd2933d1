# SPDX-License-Identifier: BSD-3-Clause
"""`pip install ./python` for a libkvcore built and installed separately: the library is found with
pkg-config (PKG_CONFIG_PATH applies) and its libdir written into kvcore/_config.py, so the package
loads that library (KVCORE_LIBRARY still overrides at run time)."""
import os
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py


def _pkg_config(*args):
    try:
        return subprocess.run(["pkg-config", *args, "kvcore"], check=True, capture_output=True,
                              text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as e:
        raise SystemExit("kvcore: pkg-config cannot find kvcore.pc (install libkvcore first, or set "
                         f"PKG_CONFIG_PATH to the directory holding kvcore.pc): {e}")


class BuildPy(build_py):
    def run(self):
        super().run()
        libdir = _pkg_config("--variable=libdir")
        path = os.path.join(self.build_lib, "kvcore", "_config.py")
        with open(path, "w") as f:
            f.write(f'# Written by setup.py from pkg-config: where libkvcore was installed.\nLIBDIR = "{libdir}"\n')


setup(version=_pkg_config("--modversion"), cmdclass={"build_py": BuildPy})
