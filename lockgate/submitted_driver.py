"""The driver script ``lockgate submit`` has Spark run on a cluster worker.

Spark's ``PythonRunner`` runs it as ``python submitted_driver.py run ... JOB -- ARGS``, a
plain script: it puts the folder holding this lockgate package first on ``sys.path`` (the
lockgate it belongs to, not another one the worker's Python may have), then is ``lockgate``
itself, its exit code the driver's.
"""

import os
import sys

if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from lockgate.cli import main

    sys.exit(main(sys.argv[1:]))
