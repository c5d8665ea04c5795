"""The Spark worker daemon's path (:mod:`lockgate.executor.spark.worker_path`): the
archives Spark puts on its Python workers' path that no worker imports from are
dropped, so a task's ``importlib.invalidate_caches()`` no longer re-reads them (about
0.3 s of every slot's start); everything a worker may import from stays."""

from __future__ import annotations

import zipfile
from pathlib import Path

from lockgate.executor.spark.worker_path import archives_to_drop, drop_archives


def _zip(path: Path, names: list[str]) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as z:
        for name in names:
            z.writestr(name, "x = 1\n")
    return str(path)


def _installed_pyspark(site: Path) -> str:
    """A site folder holding a ``pyspark`` package with Spark's bundled zip inside."""
    (site / "pyspark").mkdir(parents=True)
    (site / "pyspark" / "__init__.py").write_text("")
    return _zip(site / "pyspark" / "python" / "lib" / "pyspark.zip", ["pyspark/__init__.py"])


def test_the_bundled_pyspark_zip_and_a_jar_without_python_are_dropped(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    bundled = _installed_pyspark(site)
    py4j = _zip(site / "pyspark" / "python" / "lib" / "py4j-src.zip", ["py4j/__init__.py"])
    jar = _zip(tmp_path / "jars" / "spark-core.jar", ["org/apache/spark/A.class"])
    path = [str(tmp_path / "job"), bundled, py4j, jar, str(site)]
    assert archives_to_drop(path) == [bundled, jar]


def test_a_pyspark_zip_whose_installed_package_is_not_on_the_path_stays(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    bundled = _installed_pyspark(site)
    # without the site folder on the path the zip is the only pyspark there is
    assert archives_to_drop([bundled]) == []
    # a pyspark.zip that is not inside an installed package (a Spark distribution's)
    loose = _zip(tmp_path / "spark" / "python" / "lib" / "pyspark.zip", ["pyspark/__init__.py"])
    assert archives_to_drop([loose, str(site)]) == []


def test_a_pyspark_zip_stays_when_another_pyspark_would_be_imported_without_it(
    tmp_path: Path,
) -> None:
    site = tmp_path / "site-packages"
    bundled = _installed_pyspark(site)
    other = tmp_path / "other"
    (other / "pyspark").mkdir(parents=True)
    (other / "pyspark" / "__init__.py").write_text("")
    assert archives_to_drop([bundled, str(other), str(site)]) == []
    assert archives_to_drop([bundled, str(site), str(other)]) == [bundled]


def test_a_jar_with_python_in_it_and_a_jar_that_is_no_zip_stay(tmp_path: Path) -> None:
    with_python = _zip(tmp_path / "with-python.jar", ["pkg/__init__.py", "A.class"])
    compiled = _zip(tmp_path / "compiled.jar", ["pkg/__init__.pyc"])
    broken = tmp_path / "broken.jar"
    broken.write_bytes(b"not a zip")
    missing = str(tmp_path / "missing.jar")
    assert archives_to_drop([with_python, compiled, str(broken), missing]) == []


def test_drop_archives_removes_them_from_the_path_and_their_importers_from_the_cache(
    tmp_path: Path,
) -> None:
    site = tmp_path / "site-packages"
    bundled = _installed_pyspark(site)
    jar = _zip(tmp_path / "spark-core.jar", ["A.class"])
    keep = str(tmp_path / "job")
    path = [keep, bundled, jar, str(site)]
    cache: dict[str, object] = {
        bundled: object(),
        bundled + "/pyspark": object(),  # a package's importer inside the archive
        jar: object(),
        keep: object(),
        bundled + "-other": object(),  # another path that merely starts the same
    }
    assert drop_archives(path, cache) == [bundled, jar]
    assert path == [keep, str(site)]
    assert sorted(cache) == sorted([keep, bundled + "-other"])
