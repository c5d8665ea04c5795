"""lockgate's build backend: setuptools' own, building in a private temporary folder.

setuptools builds in ``build/`` and writes ``lockgate.egg-info`` beside the sources, so
``pip install /path/to/checkout`` (or ``pip install .``, ``python -m build``) left both in
the checkout, and a stale ``build/lib`` can carry modules deleted since into a later
wheel. Here every wheel or sdist build (and the metadata and requirement queries before
it) gets a fresh folder of its own (``tempfile.mkdtemp``: private, mode 0700), named to
setuptools through distutils' ``DIST_EXTRA_CONFIG`` (``[build] build_base``,
``[egg_info] egg_base``), and the folder is removed when the hook returns; the wheel,
the sdist or the metadata go where the frontend asked, as before. Editable installs
(``pip install -e``) are setuptools' unchanged: they are made for a checkout.
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
from collections.abc import Callable
from typing import Any

from setuptools import build_meta as _setuptools
from setuptools.build_meta import (  # noqa: F401  (the hooks passed through as they are)
    build_editable,
    get_requires_for_build_editable,
    prepare_metadata_for_build_editable,
)

_EXTRA_CONFIG = "DIST_EXTRA_CONFIG"


def _in_private_folder(hook: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(hook)
    def run(*args: Any, **kwargs: Any) -> Any:
        folder = tempfile.mkdtemp(prefix="lockgate-build-")
        config = os.path.join(folder, "build.cfg")
        with open(config, "w", encoding="utf-8") as f:
            f.write(
                f"[build]\nbuild_base = {os.path.join(folder, 'build')}\n"
                f"[egg_info]\negg_base = {folder}\n"
            )
        before = os.environ.get(_EXTRA_CONFIG)
        os.environ[_EXTRA_CONFIG] = config
        try:
            return hook(*args, **kwargs)
        finally:
            if before is None:
                os.environ.pop(_EXTRA_CONFIG, None)
            else:
                os.environ[_EXTRA_CONFIG] = before
            shutil.rmtree(folder, ignore_errors=True)

    return run


build_wheel = _in_private_folder(_setuptools.build_wheel)
build_sdist = _in_private_folder(_setuptools.build_sdist)
prepare_metadata_for_build_wheel = _in_private_folder(_setuptools.prepare_metadata_for_build_wheel)
get_requires_for_build_wheel = _in_private_folder(_setuptools.get_requires_for_build_wheel)
get_requires_for_build_sdist = _in_private_folder(_setuptools.get_requires_for_build_sdist)
