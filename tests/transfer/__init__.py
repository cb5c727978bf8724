"""Tests of carb.transfer: few-shot maps and calibration to a new device."""
