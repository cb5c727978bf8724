"""Tests of carb.measure: the protocol, the CPU and CUDA backends, the speed sentinel."""
