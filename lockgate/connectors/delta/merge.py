"""The changelog side of :class:`~lockgate.connectors.DeltaSink` (``mode="merge"``): staging
an interval's compacted changes in a file, and merging them into the table in one Delta
commit, exactly once (M-X1, M-X2, M-X3).

* **Pre-commit** (:func:`staged_table`): the last change of every key of a subtask's
  checkpoint interval (:mod:`.changelog_compaction`) is written to one Parquet file in the
  table folder, named as the sink's data files are (so the same clean-up rules apply to
  it) and never added to the Delta log: the table's columns (all nullable: a delete may
  carry only its key) plus the int8 column :data:`~lockgate.core.row_kind.KIND_COLUMN`.
  It is what the commit needs, durable before the checkpoint is acknowledged.
* **Commit** (:func:`merge_changes`): one delta-rs ``MERGE`` of that file into the table
  on the key (``t.k = s.k``): matched and the last change removes the row (``-D``,
  ``-U``) → delete; matched and it puts the row (``+I``, ``+U``) → update every column;
  not matched and it puts the row → insert. The commit carries the transaction
  identifier ``(app_id, version)`` the appends carry, so a commit repeated after a
  restore (or by the driver) finds the version recorded and changes nothing; a commit
  racing with another writer's (a subtask merging at the same moment, or a zombie of
  this app id) fails in delta-rs's conflict check and is tried again on the new table
  version, where the version check sees a zombie's success. The staged file is deleted
  by the sink once the merge is known to be in the log.
"""

from __future__ import annotations

import logging
import random
import threading
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ...core.row_kind import KIND_COLUMN, RowKind
from ...errors import LockgateError
from ..changelog_compaction import Compacted
from .log import arrow_schema, check_partitioning, check_schema_fits, deltalake, load_table
from .records import conform

log = logging.getLogger(__name__)

#: how often a merge is tried after a conflict with a concurrent commit
MERGE_ATTEMPTS = 20
_ADDITIONS = f"({int(RowKind.INSERT)}, {int(RowKind.UPDATE_AFTER)})"


class StagedChangesLostError(LockgateError, RuntimeError):
    """The staged changes of a pending merge are gone and the table does not hold them."""


def quoted(column: str) -> str:
    """``column`` as a delta-rs SQL identifier."""
    return f"`{column}`"


def staging_schema(table_schema: pa.Schema) -> pa.Schema:
    """The staged file's schema: the table's columns, all nullable, and the kind."""
    return pa.schema(
        [pa.field(f.name, f.type, nullable=True) for f in table_schema]
        + [pa.field(KIND_COLUMN, pa.int8(), nullable=False)]
    )


def staged_table(changes: Compacted, table_schema: pa.Schema, where: str) -> pa.Table:
    """``changes`` as one table of :func:`staging_schema`: the rows put checked against
    ``table_schema`` (types, and nulls in non-nullable columns), the removed keys with
    whatever else they carry (only the key is used)."""
    loose = pa.schema([pa.field(f.name, f.type, nullable=True) for f in table_schema])
    puts = conform(changes.upserts, table_schema, where).cast(loose)
    removes = conform(changes.deletes, loose, where)
    parts = []
    for part, kind in ((puts, RowKind.UPDATE_AFTER), (removes, RowKind.DELETE)):
        if part.num_rows:
            column = pa.array([int(kind)] * part.num_rows, type=pa.int8())
            parts.append(
                part.append_column(pa.field(KIND_COLUMN, pa.int8(), nullable=False), column)
            )
    if not parts:
        return staging_schema(table_schema).empty_table()
    return pa.concat_tables(parts).cast(staging_schema(table_schema))


def merge_changes(
    uri: str,
    storage_options: dict[str, str] | None,
    *,
    app_id: str,
    version: int,
    staged: str,
    filesystem: Any,
    key: list[str],
    schema_json: str,
    partition_by: list[str],
    where: str,
) -> bool:
    """Merge the staged changes file ``staged`` (a path relative to the table root on
    ``filesystem``) into the table in one commit carrying ``(app_id, version)``, creating
    an empty table (``schema_json``, ``partition_by``) first when there is none. Returns
    False, changing nothing, when the table already records ``version`` (or a later one)
    for ``app_id``."""
    dl = deltalake()
    from deltalake.transaction import CommitProperties, Transaction

    schema = dl.Schema.from_json(schema_json)
    props = CommitProperties(
        app_transactions=[Transaction(app_id, version)],
        custom_metadata={"lockgate.app_id": app_id, "lockgate.version": str(version)},
    )
    predicate = " AND ".join(f"t.{quoted(k)} = s.{quoted(k)}" for k in key)
    puts = f"s.{quoted(KIND_COLUMN)} IN {_ADDITIONS}"
    removes = f"s.{quoted(KIND_COLUMN)} NOT IN {_ADDITIONS}"
    source: pa.Table | None = None
    last: Exception | None = None
    for attempt in range(MERGE_ATTEMPTS):
        table = load_table(uri, storage_options)
        if table is None:
            try:
                dl.DeltaTable.create(
                    uri,
                    schema,
                    mode="ignore",
                    partition_by=partition_by or None,
                    storage_options=storage_options,
                )
            except dl.exceptions.DeltaError as e:  # created meanwhile by another subtask
                last = e
            continue
        done = table.transaction_version(app_id)
        if done is not None and done >= version:
            return False
        check_schema_fits(arrow_schema(table), pa.schema(schema.to_arrow()), uri)
        check_partitioning(list(table.metadata().partition_columns), partition_by, uri)
        if source is None:
            source = _read_staged(filesystem, staged, uri, storage_options, app_id, version, where)
            if source is None:
                return False  # committed meanwhile by another (its file deleted after)
        merger = table.merge(
            source,
            predicate,
            source_alias="s",
            target_alias="t",
            commit_properties=props,
        )
        merger = (
            merger.when_matched_delete(removes)
            .when_matched_update_all(puts, except_cols=[KIND_COLUMN])
            .when_not_matched_insert_all(puts, except_cols=[KIND_COLUMN])
        )
        try:
            merger.execute()
            return True
        except dl.exceptions.CommitFailedError as e:
            # a concurrent commit (another subtask's merge, a zombie of this app id):
            # look at the table again
            last = e
            log.debug("%s: merge of %s v%d conflicted (%s)", where, app_id, version, e)
            threading.Event().wait(min(1.0, 0.01 * 2**attempt) * random.random())
    assert last is not None
    raise last


def _read_staged(
    filesystem: Any,
    staged: str,
    uri: str,
    storage_options: dict[str, str] | None,
    app_id: str,
    version: int,
    where: str,
) -> pa.Table | None:
    """The staged changes; None when the file is gone because another committer of the
    same transaction merged it (the table records the version)."""
    try:
        with filesystem.open_input_file(staged) as f:
            return pq.read_table(f)
    except (FileNotFoundError, OSError) as e:
        if isinstance(e, OSError) and not isinstance(e, FileNotFoundError):
            text = str(e).lower()
            if "not found" not in text and "no such file" not in text:
                raise
        table = load_table(uri, storage_options)
        done = None if table is None else table.transaction_version(app_id)
        if done is not None and done >= version:
            return None
        raise StagedChangesLostError(
            f"{where}: the staged changes of {app_id} v{version} ({staged} in {uri}) are "
            f"gone and the table does not hold them: something deleted the file (a vacuum "
            f"with a retention shorter than a checkpoint, or a hand). Restore the job from "
            f"a checkpoint before this one, or rerun it"
        ) from e
