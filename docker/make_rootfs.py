"""Assemble a minimal root filesystem for the sim image from this machine's own Python.

No base image can be pulled here, so the image is made with ``docker import`` from a
tarball: the running interpreter (kept at its own prefix, because its RUNPATH points
there), its standard library, the third-party packages the sim needs (copied from the
running environment), the project package, and every shared library that ``ldd`` says
those need, plus the dynamic loader.

    python docker/make_rootfs.py OUT.tar [--package-dir pytest_llmslo] [--module numpy ...]
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import io
import os
import re
import subprocess
import sys
import sysconfig
import tarfile
from collections.abc import Iterable
from pathlib import Path

# Parts of the standard library a headless server never imports.
STDLIB_SKIP = {
    "test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "site-packages",
    "pydoc_data", "unittest/test", "distutils/tests", "config-3.10-x86_64-linux-gnu",
    "config-3.11-x86_64-linux-gnu", "config-3.12-x86_64-linux-gnu",
    "config-3.10-aarch64-linux-gnu", "config-3.11-aarch64-linux-gnu",
}  # fmt: skip
# Extension modules that pull in X11/Tk or databases the sim never uses.
DYNLOAD_SKIP = re.compile(r"^_(tkinter|curses|curses_panel|dbm|gdbm|sqlite3)\.")
# What the package imports at run time; those missing here are left out (the sim server
# itself needs only the standard library).
DEFAULT_MODULES = (
    "numpy", "httpx", "httpcore", "h11", "anyio", "idna", "sniffio", "certifi",
    "typing_extensions",
)  # fmt: skip
SITE = "/opt/llmslo/site"


def _is_elf(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def _ldd(path: Path) -> set[str]:
    out = subprocess.run(["ldd", str(path)], capture_output=True, text=True).stdout
    libs = set()
    for line in out.splitlines():
        m = re.search(r"=>\s*(/\S+)", line) or re.match(r"\s*(/\S+)", line)
        if m:
            libs.add(m.group(1))
    return libs


def _walk(root: Path, skip: Iterable[str] = ()) -> Iterable[Path]:
    skip_set = set(skip)
    for dirpath, dirnames, filenames in os.walk(root):
        rel = Path(dirpath).relative_to(root).as_posix()
        dirnames[:] = [d for d in dirnames if (f"{rel}/{d}" if rel != "." else d) not in skip_set]
        for name in filenames:
            yield Path(dirpath) / name


def _module_paths(name: str) -> list[Path]:
    if importlib.util.find_spec(name) is None:
        print(f"note: {name} is not installed here; left out of the image", file=sys.stderr)
        return []
    mod = importlib.import_module(name)
    file = getattr(mod, "__file__", None)
    if not file:
        raise SystemExit(f"module {name} has no file")
    p = Path(file)
    paths = [p.parent] if p.name == "__init__.py" else [p]
    # numpy and friends keep their vendored shared libraries next to the package.
    libs = p.parent.parent / f"{name}.libs"
    if libs.is_dir():
        paths.append(libs)
    return paths


def build(out: Path, package_dir: Path, modules: Iterable[str]) -> None:
    prefix = Path(sys.base_prefix)
    ver = f"python{sys.version_info.major}.{sys.version_info.minor}"
    stdlib = Path(sysconfig.get_paths(vars={"base": str(prefix)})["stdlib"])
    files: dict[str, Path] = {}  # path in image -> path here
    exe = prefix / "bin" / ver
    files[str(exe)] = exe
    for lib in (prefix / "lib").glob("libpython*.so.*"):
        files[str(lib)] = lib
    for f in _walk(stdlib, STDLIB_SKIP):
        if f.parent.name == "lib-dynload" and DYNLOAD_SKIP.match(f.name):
            continue
        files[str(f)] = f
    for name in modules:
        for p in _module_paths(name):
            base = p.parent
            for f in _walk(p) if p.is_dir() else [p]:
                files[f"{SITE}/{f.relative_to(base)}"] = f
    for f in _walk(package_dir):
        if "__pycache__" not in f.parts:
            files[f"{SITE}/{package_dir.name}/{f.relative_to(package_dir)}"] = f
    libs: set[str] = set()
    for f in list(files.values()):
        if f.suffix == ".so" or ".so." in f.name or f == exe:
            if _is_elf(f):
                libs |= _ldd(f)
    for lib in libs:
        norm = os.path.normpath(lib)
        # Libraries vendored inside copied packages (numpy.libs) are already in the image.
        if norm.startswith(("/lib", "/usr/lib", "/lib64", str(prefix))):
            files.setdefault(norm, Path(lib).resolve())
    with tarfile.open(out, "w") as tar:
        for d in ("tmp", "etc", "usr/bin", "bin", "root", "dev", "proc", "sys"):
            info = tarfile.TarInfo(d)
            info.type = tarfile.DIRTYPE
            info.mode = 0o1777 if d == "tmp" else 0o755
            tar.addfile(info)
        for name, text in {
            "etc/passwd": "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534::/:/bin/false\n",
            "etc/group": "root:x:0:\nnogroup:x:65534:\n",
            "etc/hosts": "127.0.0.1 localhost\n",
        }.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
        for dest, src in sorted(files.items()):
            tar.add(str(src.resolve()), arcname=dest.lstrip("/"), recursive=False)
        for link in ("usr/bin/python3", "usr/bin/python"):
            info = tarfile.TarInfo(link)
            info.type = tarfile.SYMTYPE
            info.linkname = str(exe)
            tar.addfile(info)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--package-dir", type=Path, default=Path(__file__).parents[1] / "pytest_llmslo")
    ap.add_argument("--module", action="append", dest="modules")
    args = ap.parse_args()
    build(args.out, args.package_dir.resolve(), args.modules or DEFAULT_MODULES)
    print(f"rootfs written to {args.out} ({args.out.stat().st_size / 1e6:.0f} MB)")


if __name__ == "__main__":
    main()
