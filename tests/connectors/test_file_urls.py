"""FileSource and FileSink take ``file://`` URLs (issue 18 item 11): ``file:///data/out`` is
the folder ``/data/out``, never a folder called ``file:`` under the working directory; a URL
that ``pyarrow.fs`` cannot open is refused with an error saying what is supported (s3:// is
tested in ``test_s3_file_connectors.py``). Jobs on the local
executor and on Spark (local[2])."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import lockgate as lg
from lockgate.connectors import FileSink, FileSource
from lockgate.connectors.local_paths import local_path
from lockgate.errors import ConfigurationError


def published(folder: Path) -> list[int]:
    return sorted(
        json.loads(line)["v"]
        for part in folder.glob("part-*")
        for line in part.read_text().splitlines()
        if line
    )


@pytest.mark.parametrize("exactly_once", [True, False])
def test_a_file_sink_given_a_file_url_writes_into_the_folder_it_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, executor: Any, exactly_once: bool
) -> None:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    out = tmp_path / "out folder"  # a space: percent-encoded in the URL
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"v": i}) + "\n" for i in range(20)))
    env = lg.StreamEnvironment(parallelism=1)
    (
        env.from_source(FileSource(src.as_uri()), name="in").sink_to(
            FileSink(out.as_uri(), exactly_once=exactly_once), name="out"
        )
    )
    env.execute("file urls", executor=executor)
    assert "%20" in out.as_uri()
    assert published(out) == list(range(20))
    assert list(cwd.iterdir()) == [], "nothing may be written under the working directory"


@pytest.mark.parametrize(
    "url, path",
    [
        ("file:///data/out", "/data/out"),
        ("file://localhost/data/out", "/data/out"),
        ("FILE:///data/out", "/data/out"),
        ("file:/data/out", "/data/out"),
        ("file:///data/a%20b%23c", "/data/a b#c"),
        ("relative/out", "relative/out"),
        ("events:1.jsonl", "events:1.jsonl"),
        (Path("/data/out"), "/data/out"),
    ],
)
def test_file_urls_and_plain_paths_name_a_local_path(url: Any, path: str) -> None:
    assert local_path("FileSink", url) == path


@pytest.mark.parametrize(
    "url, needle",
    [
        ("hdfs://nn/out", "pyarrow.fs cannot open it"),
        ("gs:/bucket/out", "Missing bucket name"),
        ("nosuch://bucket/out", "Unrecognized filesystem type"),
        ("file://otherhost/data/out", "names host 'otherhost'"),
        ("file:relative/out", "not an absolute file URL"),
        ("file:///data/out?x=1", "query or fragment"),
        ("", "non-empty str"),
        (b"/data/out", "non-empty str"),
        (3, "non-empty str"),
    ],
)
def test_other_urls_are_refused_saying_what_is_supported(
    tmp_path: Path, url: Any, needle: str
) -> None:
    with pytest.raises(ConfigurationError, match="FileSink path") as err:
        FileSink(url)
    assert needle in str(err.value)
    with pytest.raises(ConfigurationError, match="FileSource path") as err:
        FileSource(url)
    assert needle in str(err.value)


def test_a_file_source_given_a_file_url_of_a_missing_path_names_the_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="does not exist") as err:
        FileSource((tmp_path / "missing").as_uri())
    assert repr(str(tmp_path / "missing")) in str(err.value)
