"""Tests of carb.netmodel: the layer and network models."""
