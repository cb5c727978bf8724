"""Test shim: stands in for an amdsmi binding that cannot load (no ROCm library here), so
that Ray's AMD probe in the `ray start` processes of tests/campaign/test_ray_executor.py sees an
ImportError, as it expects, instead of amdsmi's KeyError."""

raise ImportError("amdsmi masked: no ROCm library on this machine (carb tests)")
