"""The built-in configuration spaces, one TOML file each, read by :func:`carb.families.space.load`."""
