"""The wheel: it ships the instances, and an installed copy runs shipped names from any folder."""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import schedopt

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
ENV.pop("SCHEDOPT_INSTANCES", None)
ENV.pop("PYTHONPATH", None)


def _run(args: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, env=ENV, capture_output=True, text=True,
                          timeout=timeout, check=False)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build the wheel from a copy of this checkout (setuptools builds in the source tree)."""
    out = tmp_path_factory.mktemp("wheel")
    src = tmp_path_factory.mktemp("src")
    junk = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for name in ("schedopt", "instances"):
        shutil.copytree(ROOT / name, src / name, ignore=junk)
    proc = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                 "--no-index", "-q", "-w", str(out), str(src)], cwd=src, timeout=300)
    if proc.returncode != 0 and "No module named pip" in proc.stderr:
        pytest.skip("pip is not installed in this environment")
    assert proc.returncode == 0, proc.stderr
    (whl,) = out.glob("schedopt-*.whl")
    return whl


def test_wheel_ships_every_instance_and_no_script(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for kind in ("traces", "clusters"):
        shipped = {p.name for p in (ROOT / "instances" / kind).glob("*.json")}
        assert shipped, kind
        packed = {n.rsplit("/", 1)[1] for n in names
                  if n.startswith(f"schedopt/_instances/{kind}/")}
        assert packed == shipped, kind
    assert "schedopt/_instances/samples/osu_allreduce8.log" in names
    assert not any(n.endswith("generate.py") for n in names)  # the maintainers' generator


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel installed; dependencies reused from this environment."""
    env = tmp_path_factory.mktemp("venv") / "env"
    proc = _run([sys.executable, "-m", "venv", "--without-pip", str(env)], cwd=env.parent)
    assert proc.returncode == 0, proc.stderr
    py = env / "bin" / "python"
    purelib = _run([str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                   cwd=env.parent).stdout.strip()
    # the dependencies (pydantic, ortools, ...) from this environment's site-packages, as a
    # plain path entry: its .pth files, among them an editable install's finder, are not run
    (Path(purelib) / "deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    proc = _run([sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps",
                 "--no-index", "-q", str(wheel)], cwd=env.parent, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return env


def test_installed_wheel_runs_shipped_names_from_another_folder(venv: Path,
                                                                tmp_path: Path) -> None:
    where = _run([str(venv / "bin" / "python"), "-c",
                  "import schedopt, schedopt.files as f; print(schedopt.__file__);"
                  " print(f.instances_dir())"], cwd=tmp_path)
    assert where.returncode == 0, where.stderr
    module, folder = where.stdout.split()
    assert Path(module).is_relative_to(venv) and Path(folder).is_relative_to(venv)
    proc = _run([str(venv / "bin" / "schedopt"), "simulate", "resnet50-v100-b64", "dgx-a100-4n",
                 "-p", "ddp", "--json"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    installed = json.loads(proc.stdout)["iteration_time_s"]
    here = _run([sys.executable, "-m", "schedopt", "simulate", "resnet50-v100-b64",
                 "dgx-a100-4n", "-p", "ddp", "--json"], cwd=tmp_path)
    assert installed == json.loads(here.stdout)["iteration_time_s"]
    listed = _run([str(venv / "bin" / "schedopt"), "list", "--json"], cwd=tmp_path)
    names = {r["name"] for r in json.loads(listed.stdout)["instances"]}
    assert {"resnet50-v100-b64", "10gbe-k80-family"} <= names
    version = _run([str(venv / "bin" / "schedopt"), "--version"], cwd=tmp_path)
    assert version.returncode == 0 and version.stdout.strip() == f"schedopt {schedopt.__version__}"
