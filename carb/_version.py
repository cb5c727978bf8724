"""The installed carb's version.

It lives in a module of its own so that any layer may import it without importing the package's ``__init__``
(which reaches up to :mod:`carb.netmodel` for ``carb.predict_module``).
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("carb")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"
