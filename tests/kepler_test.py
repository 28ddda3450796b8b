import jax, jaxext
def test_smoke():
  print(jaxext.kepler(1.0, 0.5))
