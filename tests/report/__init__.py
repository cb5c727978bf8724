"""Tests of carb.report: the report page and its figures."""
