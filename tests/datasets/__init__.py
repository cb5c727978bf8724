"""Tests of carb.datasets: dataset files, the shipped datasets, HELP's FBNet data."""
