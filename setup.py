"""Packaging details that pyproject.toml cannot express.

The shipped instances live in ``instances/`` at the repository root (one copy, part of the
project's layout); the wheel installs them as the data package ``schedopt._instances``, which
:func:`schedopt.files.instances_dir` finds next to the installed package.
"""

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py


class BuildPy(build_py):
    """Ship the instances' data files, not ``instances/generate.py`` (a maintainer's script)."""

    def find_package_modules(self, package, package_dir):  # type: ignore[no-untyped-def]
        if package == "schedopt._instances":
            return []
        return super().find_package_modules(package, package_dir)


setup(
    cmdclass={"build_py": BuildPy},
    packages=[*find_packages(include=["schedopt", "schedopt.*"]), "schedopt._instances"],
    package_dir={"schedopt._instances": "instances"},
    package_data={
        "schedopt._instances": ["README.md", "traces/*.json", "clusters/*.json", "samples/*"],
    },
)
