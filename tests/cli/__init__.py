"""Tests of carb.cli: the `carb` command, its inputs, messages and progress lines."""
