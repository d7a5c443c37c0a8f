"""setuptools hook for one thing pyproject.toml cannot say: the wheel's ``ddqhost.suite`` (built
from tests/) leaves out the CPython-only test helpers that pyproject's
[tool.setuptools.exclude-package-data] names. setuptools applies that table to data files only and
takes every .py file of a package as a module, so build_py drops them here. Everything else is in
pyproject.toml."""

import os
import tomllib

from setuptools import setup
from setuptools.command.build_py import build_py

with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "pyproject.toml"), "rb") as _f:
    _EXCLUDE = tomllib.load(_f)["tool"]["setuptools"]["exclude-package-data"]


class BuildPy(build_py):
    def find_package_modules(self, package, package_dir):
        drop = set(_EXCLUDE.get(package, ()))
        return [m for m in super().find_package_modules(package, package_dir)
                if m[1] + ".py" not in drop]


setup(cmdclass={"build_py": BuildPy})
