"""Compatibility name for :mod:`carb.families.fbnet` (the FBNet family now lives in the
families package): ``from carb import fbnet`` and ``import carb.fbnet`` give that module."""

import sys

from carb.families import fbnet as _fbnet

sys.modules[__name__] = _fbnet
