"""Tests of carb.model: the config model CARB, its bundles and evaluation."""
