"""Tests of carb.studies: the papers' protocols and analyses."""
