# Applied by tools/bazel to a copy of Debian's rules_python (0.22.1) for the toolchain root's Bazel:
# its pip.parse installs with pip 22.3.1 and setuptools 60.10.0, whose pkg_resources registers
# pkgutil.ImpImporter, gone since CPython 3.12, so every pip.parse failed on the root's Pythons.
# These move the two wheels (from PyPI, hash-pinned) to releases that import on 3.12-3.15. Each
# substitution must change a line of its own (tools/bazel checks it).
s|https://files.pythonhosted.org/packages/09/bd/2410905c76ee14c62baf69e3f4aa780226c1bbfc9485731ad018e35b0cb5/pip-22.3.1-py3-none-any.whl|https://files.pythonhosted.org/packages/ef/7d/500c9ad20238fcfcb4cb9243eede163594d7020ce87bd9610c9e02771876/pip-24.3.1-py3-none-any.whl|
s|908c78e6bc29b676ede1c4d57981d490cb892eb45cd8c214ab6298125119e077|3790624780082365f47549d032f3770eeb2b1e8bd1f7b2e02dace1afa361b4ed|
s|https://files.pythonhosted.org/packages/7c/5b/3d92b9f0f7ca1645cba48c080b54fe7d8b1033a4e5720091d1631c4266db/setuptools-60.10.0-py3-none-any.whl|https://files.pythonhosted.org/packages/69/8a/b9dc7678803429e4a3bc9ba462fa3dd9066824d3c607490235c6a796be5a/setuptools-75.8.0-py3-none-any.whl|
s|782ef48d58982ddb49920c11a0c5c9c0b02e7d7d1c2ad0aa44e1a1e133051c96|e3982f444617239225d675215d51f6ba05f845d4eec313da4418fdbb56fb27e3|
