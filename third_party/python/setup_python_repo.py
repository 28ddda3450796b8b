"""Populates jaxext's Python repositories (run by python_repository.bzl with the selected CPython).

    setup_python_repo.py headers OUT_DIR
        @jaxext_python_headers: copies the interpreter's C headers to OUT_DIR/python_include.
    setup_python_repo.py OUT_DIR LOCK_FILE INDEX_URL JAX_SET
        @jaxext_python (the test environment): creates a virtual environment, installs the locked
        wheels into it with pip's --require-hashes (no dependency resolution, no source builds, no
        user or site configuration) and copies NumPy's C headers (the benchmark's extension).
"""

import json
import os
import shutil
import subprocess
import sys
import sysconfig


def cert_args() -> list[str]:
  """pip's --cert: the system's CA bundle where there is one.

  Debian's pip trusts the system store, but an interpreter built elsewhere (pyenv's, python.org's)
  brings a pip that trusts only its own copy of certifi, which lacks the CAs a site adds.
  """
  for bundle in (os.environ.get("SSL_CERT_FILE", ""), "/etc/ssl/certs/ca-certificates.crt"):
    if bundle and os.path.isfile(bundle):
      return ["--cert", bundle]
  return []


def copy_python_headers(out_dir: str) -> None:
  """This interpreter's C headers to OUT_DIR/python_include (Debian's multiarch pyconfig.h folded in)."""
  inc = os.path.join(out_dir, "python_include")
  shutil.rmtree(inc, ignore_errors=True)
  shutil.copytree(sysconfig.get_path("include"), inc)
  plat = sysconfig.get_path("platinclude")
  for root, _, files in os.walk(plat):
    for f in files:
      if f == "pyconfig.h":
        shutil.copy(os.path.join(root, f), os.path.join(inc, "pyconfig.h"))
  # Debian's pyconfig.h includes <MULTIARCH/python3.X/pyconfig.h> from /usr/include, which only
  # the system compiler searches: that directory is copied beside it (zig's clang, for one, looks
  # only where it is told).
  multiarch = sysconfig.get_config_var("MULTIARCH")
  include = sysconfig.get_path("include")
  arch_dir = os.path.join(os.path.dirname(include), multiarch or "", os.path.basename(include))
  if multiarch and os.path.isfile(os.path.join(arch_dir, "pyconfig.h")):
    shutil.copytree(arch_dir, os.path.join(inc, multiarch, os.path.basename(include)))


def main() -> None:
  if sys.argv[1] == "headers":
    copy_python_headers(sys.argv[2])
    return
  out_dir, lock, index_url, jax_set = sys.argv[1:5]
  venv = os.path.join(out_dir, "venv")
  if not os.path.exists(os.path.join(venv, "bin", "python3")):
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
  vpy = os.path.join(venv, "bin", "python3")
  env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON"))}
  subprocess.run(
      [vpy, "-m", "pip", "install", "--isolated", "--no-input", "--disable-pip-version-check",
       "--require-hashes", "--no-deps", "--only-binary=:all:", "--index-url", index_url,
       "--quiet", "-r", lock] + cert_args(),
      check=True, env=env)

  probe = ("import json, sysconfig, importlib.metadata as m; print(json.dumps({"
           "'site': sysconfig.get_path('purelib'), 'jax': m.version('jax'), "
           "'jaxlib': m.version('jaxlib'), 'numpy': m.version('numpy')}))")
  found = json.loads(subprocess.run([vpy, "-I", "-c", probe], check=True, capture_output=True,
                                    text=True, env=env).stdout)
  site = found["site"]
  numpy_include = os.path.join(out_dir, "numpy_include")
  shutil.rmtree(numpy_include, ignore_errors=True)
  shutil.copytree(os.path.join(site, "numpy", "_core", "include"), numpy_include)

  info = {
      "python_version": "%d.%d.%d" % sys.version_info[:3],
      "python_tag": "cp%d%d" % sys.version_info[:2],
      "interpreter": os.path.abspath(vpy),
      "base_interpreter": sys.executable,
      "site_packages": site,
      "jax_set": jax_set,
      "jax": found["jax"],
      "jaxlib": found["jaxlib"],
      "numpy": found["numpy"],
  }
  with open(os.path.join(out_dir, "python_info.json"), "w") as f:
    json.dump(info, f, indent=2, sort_keys=True)


if __name__ == "__main__":
  main()
