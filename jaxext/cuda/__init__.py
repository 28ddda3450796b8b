"""CUDA extension of jaxext (`_cuda_ops`), present in builds made with --config=cuda."""
