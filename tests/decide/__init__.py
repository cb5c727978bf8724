"""Tests of carb.decide: screening, Pareto fronts, budget calls and their validation."""
