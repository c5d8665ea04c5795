"""Reading savepoints and checkpoints offline (M-S1, M-S3, M-T4).

``lockgate.savepoint.read(path)`` gives a :class:`Savepoint`: the operators it holds
(:meth:`Savepoint.operators`: per uid, the parallelism and the states with their
kinds) and each state as a :class:`StateFrame` (:meth:`Savepoint.state`), with columns
``key``, ``namespace``, ``value``, as a ``pyarrow.Table`` (:meth:`StateFrame.to_arrow`),
a pandas DataFrame of the exact Python values (:meth:`StateFrame.to_pandas`, needs
pandas) or a Spark DataFrame (:meth:`StateFrame.to_spark`)::

    sp = lockgate.savepoint.read("/savepoints/sp-1")
    sp.operators()                       # {"counter": OperatorInfo(uid=..., ...)}
    sp.state("counter", "count").to_pandas()

Nothing is unpickled unless ``read(path, allow_pickle=True)``: operators, states and
typed state (``type=`` on a descriptor) read without running any code named by the
files; a pickled state raises :class:`PickledStateError` until pickles are allowed.

The state of a window join, window co-group or interval join is listed by
``operators()`` but not readable: ``state()`` raises :class:`SavepointFormatError`
naming the operator (the savepoint still restores the job).

``lockgate.savepoint.check(path, env)`` checks a savepoint against a job before it is
deployed (:mod:`lockgate.savepoint.check`): which operators and states match, what
evolves, what is incompatible or would be dropped. ``lockgate.savepoint.write(path,
states)`` builds a savepoint from pandas, Arrow or Spark frames
(:mod:`lockgate.savepoint.writer`): bootstrap a job's state from a batch job's result,
or read, change and write a savepoint back.
"""

from .check import CheckReport, OperatorCheck, StateCheck, check
from .errors import (
    MissingDependencyError,
    PickledStateError,
    SavepointFormatError,
    StateConversionError,
)
from .frame import StateFrame
from .model import FUNCTION_STATE, RAW_STATE, OperatorInfo, StateInfo, StateKind
from .reader import Savepoint, read
from .writer import State, write

__all__ = [
    "CheckReport",
    "OperatorCheck",
    "StateCheck",
    "check",
    "FUNCTION_STATE",
    "RAW_STATE",
    "MissingDependencyError",
    "OperatorInfo",
    "PickledStateError",
    "Savepoint",
    "SavepointFormatError",
    "StateConversionError",
    "StateFrame",
    "StateInfo",
    "State",
    "StateKind",
    "read",
    "write",
]
