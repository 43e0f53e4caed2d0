"""Make llamafactory start on a CPU-only torch (docs/dependencies.md).

The registry's torchvision/torchaudio wheels are CUDA builds whose compiled parts cannot load
against CPU torch, and then ``llamafactory-cli`` dies at import. On a machine without CUDA this
removes torchvision and torchcodec and the compiled libraries of torchaudio (which then imports as
pure Python). It does nothing where torch has CUDA. Run with the virtualenv's python.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path


def main() -> int:
    import torch

    if torch.version.cuda:
        print("fix_cpu_torch: CUDA torch, nothing to do")
        return 0
    present = [name for name in ("torchvision", "torchcodec") if importlib.util.find_spec(name)]
    if present:
        subprocess.run([sys.executable, "-m", "pip", "uninstall", "-q", "-y", *present], check=True)
    spec = importlib.util.find_spec("torchaudio")
    removed = []
    if spec and spec.origin:
        for lib in (Path(spec.origin).parent / "lib").glob("*.so"):
            lib.unlink()
            removed.append(lib.name)
    print(f"fix_cpu_torch: uninstalled {present or 'nothing'}, removed torchaudio libs {removed or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
