"""Tests of carb.families: configs, spaces, builders and closed-form features of every family."""
