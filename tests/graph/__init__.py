"""Tests of carb.graph: capturing a module's operator graph."""
