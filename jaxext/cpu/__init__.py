"""CPU extension of jaxext (`_cpu_ops`)."""
