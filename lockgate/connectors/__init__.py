"""Sources and sinks."""

from .base import InputStatus, ReaderOutput, Sink, SinkWriter, Source, SourceReader
from .collect_sink import CollectSink
from .collection import CollectionSource
from .discarding_sink import DiscardingSink
from .file_sink import FileSink
from .file_source import FileSource
from .print_sink import PrintSink
from .sequence import SequenceSource
from .two_phase_commit import FinalCommit, TwoPhaseCommitSink

__all__ = [
    "CollectSink",
    "CollectionSource",
    "DiscardingSink",
    "FileSink",
    "FileSource",
    "FinalCommit",
    "InputStatus",
    "PrintSink",
    "ReaderOutput",
    "SequenceSource",
    "Sink",
    "SinkWriter",
    "Source",
    "SourceReader",
    "TwoPhaseCommitSink",
]
