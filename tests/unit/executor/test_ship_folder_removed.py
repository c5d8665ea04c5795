"""Issue 18 item 11: the folder the Spark executor ships the lockgate package from
(``lockgate-ship-*``) is removed when the driver process ends; it used to stay in the
temporary folder for ever, one per driver run."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap


def test_issue18_item11_the_ship_folder_goes_when_the_driver_process_ends(tmp_path) -> None:
    script = textwrap.dedent("""
        import os, sys
        from lockgate.executor.spark.executor import SparkExecutor

        class Context:  # records what Spark would fetch; no Spark needed for this
            def addPyFile(self, path):
                assert os.path.isfile(path), path
                print(os.path.dirname(path))

        SparkExecutor(ship_package=True)._ship(Context())
    """)
    env = dict(os.environ, TMPDIR=str(tmp_path))
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=str(tmp_path),
    )
    assert done.returncode == 0, done.stderr
    folder = done.stdout.strip().splitlines()[-1]
    assert os.path.basename(folder).startswith("lockgate-ship-"), folder
    assert folder.startswith(str(tmp_path)), "made in the temporary folder"
    assert not os.path.exists(folder), f"{folder} is left behind after the driver ended"
