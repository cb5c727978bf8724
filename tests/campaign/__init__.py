"""Tests of carb.campaign: the runner, the store, rounds, retakes and the speed index."""
