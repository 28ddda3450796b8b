"""jaxext ops across processes: two local processes joined by jax.distributed (CPU, gloo
collectives), two host devices each, one global mesh of four. Each process feeds its own rows,
runs the ops under jit with sharded global arrays, and checks its own shards against a local
single-device computation and the compiled program for cross-device traffic."""

import os
import socket
import subprocess
import sys

import pytest

WORKER = r"""
import os, re, sys
os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
import jax
jax.config.update("jax_enable_x64", True)
try:
  jax.config.update("jax_cpu_collectives_implementation", "gloo")
except AttributeError:
  pass
process, port = int(sys.argv[1]), sys.argv[2]
jax.distributed.initialize(coordinator_address=f"localhost:{port}", num_processes=2,
                           process_id=process, initialization_timeout=120)
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import jaxext
from jaxext import ode

assert jax.process_count() == 2 and len(jax.devices()) == 4 and len(jax.local_devices()) == 2
mesh = Mesh(np.array(jax.devices()), ("x",))
rows = NamedSharding(mesh, P("x"))
gather = re.compile(r"\b(all-gather|all-to-all|collective-permute|all-reduce)\b")

def global_array(local, sharding):
  return jax.make_array_from_process_local_data(sharding, local)

def local_rows(x):
  return np.concatenate([np.asarray(s.data) for s in sorted(x.addressable_shards,
                                                            key=lambda s: s.index[0].start)])

def check_local(fn, *args):
  text = jax.jit(fn).lower(*args).compile().as_text()
  found = gather.findall(text)
  assert not found, f"cross-device collectives {sorted(set(found))}"
  return jax.jit(fn)(*args)

# kepler: 512 elements per process
rng = np.random.default_rng(10 + process)
m = rng.uniform(-10, 10, 512)
e = rng.uniform(0, 0.9, 512)
s, c = check_local(jaxext.kepler, global_array(m, rows), global_array(e, rows))
assert s.shape == (1024,)
s_local, c_local = jaxext.kepler(m, e)
np.testing.assert_array_equal(local_rows(s), np.asarray(s_local))
np.testing.assert_array_equal(local_rows(c), np.asarray(c_local))

# dop853: 8 orbits per process, J2 + drag
r = ode.models.EARTH_RADIUS + rng.uniform(300, 900, 8)
v = np.sqrt(ode.models.EARTH_MU / r)
inc = rng.uniform(0, np.pi, 8)
y0 = np.stack([r, 0 * r, 0 * r, 0 * r, v * np.cos(inc), v * np.sin(inc)], axis=1)
b = rng.uniform(0.005, 0.05, (8, 1))
model = ode.models.earth(j2=True, drag=True)
run = lambda y, p: ode.dop853(model, y, (0.0, 5400.0), p, rtol=1e-10, atol=1e-10)
sol = check_local(run, global_array(y0, rows), global_array(b, rows))
assert sol.y_final.shape == (16, 6)
ref = run(y0, b)
np.testing.assert_array_equal(local_rows(sol.y_final), np.asarray(ref.y_final))
np.testing.assert_array_equal(local_rows(sol.n_rhs), np.asarray(ref.n_rhs))
jax.distributed.shutdown()
print("worker", process, "OK")
"""


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


def test_two_processes():
  port = str(_free_port())
  env = dict(os.environ)
  env.pop("XLA_FLAGS", None)
  procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(i), port], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
           for i in range(2)]
  outputs = []
  try:
    for p in procs:
      out, _ = p.communicate(timeout=240)
      outputs.append(out)
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
  for i, (p, out) in enumerate(zip(procs, outputs)):
    assert p.returncode == 0, f"worker {i} failed:\n{out[-4000:]}"
    assert f"worker {i} OK" in out
