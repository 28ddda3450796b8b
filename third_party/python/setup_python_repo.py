"""Populates the @jaxext_python repository (run by python_repository.bzl with the pinned interpreter).

Creates a virtual environment, installs the pinned wheels into it with pip's --require-hashes (no
dependency resolution, no source builds, no user or site configuration), and copies the headers the
C++ build needs: Python's own, pybind11's and the XLA FFI headers shipped in the pinned jaxlib.
"""

import json
import os
import shutil
import subprocess
import sys
import sysconfig


def main() -> None:
    out_dir, requirements, index_url, expected_version = sys.argv[1:5]
    venv = os.path.join(out_dir, "venv")
    if not os.path.exists(os.path.join(venv, "bin", "python3")):
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    vpy = os.path.join(venv, "bin", "python3")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON"))}
    subprocess.run(
        [vpy, "-m", "pip", "install", "--isolated", "--no-input", "--disable-pip-version-check",
         "--require-hashes", "--no-deps", "--only-binary=:all:", "--index-url", index_url,
         "--quiet", "-r", requirements],
        check=True, env=env)

    # Python headers (with Debian's multiarch pyconfig.h folded in).
    inc = os.path.join(out_dir, "python_include")
    shutil.rmtree(inc, ignore_errors=True)
    shutil.copytree(sysconfig.get_path("include"), inc)
    plat = sysconfig.get_path("platinclude")
    for root, _, files in os.walk(plat):
        for f in files:
            if f == "pyconfig.h":
                shutil.copy(os.path.join(root, f), os.path.join(inc, "pyconfig.h"))

    site = subprocess.run([vpy, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          check=True, capture_output=True, text=True).stdout.strip()
    for src, dst in ((os.path.join(site, "pybind11", "include"), "pybind11_include"),
                     (os.path.join(site, "jaxlib", "include"), "xla_ffi_include"),
                     (os.path.join(site, "numpy", "_core", "include"), "numpy_include")):
        shutil.rmtree(os.path.join(out_dir, dst), ignore_errors=True)
        shutil.copytree(src, os.path.join(out_dir, dst))

    ffi_version = {}
    with open(os.path.join(out_dir, "xla_ffi_include", "xla", "ffi", "api", "c_api.h")) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3 and parts[0] == "#define" and parts[1] in (
                    "XLA_FFI_API_MAJOR", "XLA_FFI_API_MINOR"):
                ffi_version[parts[1]] = int(parts[2])
    info = {
        "python_version": "%d.%d.%d" % sys.version_info[:3],
        "expected_python_version": expected_version,
        "python_tag": "cp%d%d" % sys.version_info[:2],
        "interpreter": os.path.abspath(vpy),
        "site_packages": site,
        "xla_ffi_api": "%d.%d" % (ffi_version["XLA_FFI_API_MAJOR"], ffi_version["XLA_FFI_API_MINOR"]),
    }
    with open(os.path.join(out_dir, "python_info.json"), "w") as f:
        json.dump(info, f, indent=2, sort_keys=True)


if __name__ == "__main__":
    main()
