"""The `embedlab` kernel's spec: this Python, loading the cell guard (`python -m embedlab.notebook.kernelspec`).

A Jupyter kernel is what JupyterLab, papermill and VS Code all start from a kernelspec,
so the cell guard rides there: the spec runs `ipykernel_launcher --ext
embedlab.notebook.cellguard` (IPython's own way to load an extension at start-up), and
every notebook that names the kernel is guarded from its first cell, with no line of its
own. `make install` writes it for the user (`~/.local/share/jupyter/kernels/embedlab`),
and `embedlab regress` refuses a spec that lacks it (`reports.regress.check_kernel`).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from ..defaults import CELL_GUARD_EXTENSION, KERNEL_DISPLAY_NAME, KERNEL_NAME

__all__ = ["KERNEL_ARGS", "install"]

# After the launcher's `-f {connection_file}`: what the kernel loads.
KERNEL_ARGS = ["--ext", CELL_GUARD_EXTENSION]


def install(*, name: str = KERNEL_NAME, display_name: str = KERNEL_DISPLAY_NAME, user: bool = True) -> str:
    """Register this Python as the kernel `name`, loading the cell guard; returns where its spec lies."""
    from ipykernel.kernelspec import write_kernel_spec
    from jupyter_client.kernelspec import KernelSpecManager

    # Staged in a folder that goes afterwards (ipykernel's own temp folder would stay behind).
    with tempfile.TemporaryDirectory(prefix="embedlab-kernelspec-") as stage:
        path = write_kernel_spec(
            Path(stage) / name,
            overrides={"display_name": display_name},
            extra_arguments=KERNEL_ARGS,
            # As `ipykernel install` does: the debugger cannot step into frozen modules.
            python_arguments=["-Xfrozen_modules=off"],
        )
        return str(KernelSpecManager().install_kernel_spec(path, kernel_name=name, user=user))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m embedlab.notebook.kernelspec", description=__doc__)
    parser.add_argument("--name", default=KERNEL_NAME, help=f"the kernel's name (default {KERNEL_NAME})")
    parser.add_argument("--display-name", default=KERNEL_DISPLAY_NAME, help="the name JupyterLab shows")
    args = parser.parse_args(argv)
    where = install(name=args.name, display_name=args.display_name)
    print(f"installed the Jupyter kernel {args.name!r} ({sys.executable}, with the cell guard) in {where}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
