"""Tests of carb: one folder per package room, package-wide checks at the top."""
