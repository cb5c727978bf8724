"""The datasets' one-line error, in a module of its own.

The dataset loaders of the package import it from here without importing the package's ``__init__`` (which imports
them).
"""


class DatasetError(ValueError):
    """A dataset name is unknown or a dataset file is broken; the message is one line."""
