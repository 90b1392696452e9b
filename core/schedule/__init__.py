"""Tensor graph -> kernels: where to cut, how movement ops become index math, and the linear schedule."""
