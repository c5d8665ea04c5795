"""Subject name strategies: under which registry subject a writer registers (or looks
up) the schema of a topic's values or keys.

The names are Confluent's (its serializers' ``subject.name.strategy``):

* ``"topic"`` (TopicNameStrategy, the default): ``<topic>-value`` (``<topic>-key`` for
  keys); one schema (and its versions) per topic;
* ``"record"`` (RecordNameStrategy): the record type's fully-qualified name (an Avro
  ``namespace.name``, a Protobuf message's full name, a JSON Schema's ``title``); one
  record type may then be written to many topics under one evolution history;
* ``"topic_record"`` (TopicRecordNameStrategy): ``<topic>-<fully-qualified name>``.
"""

from __future__ import annotations

from ...errors import ConfigurationError

#: the subject name strategies, by Confluent's names without "Strategy"
STRATEGIES = ("topic", "record", "topic_record")


def check_strategy(owner: str, value: object) -> str:
    """``value`` checked to be one of :data:`STRATEGIES`."""
    if value not in STRATEGIES:
        raise ConfigurationError(
            f"{owner} subject_strategy must be one of "
            f"{', '.join(repr(s) for s in STRATEGIES)} ('topic': subject '<topic>-value'; "
            "'record': the record type's fully-qualified name; 'topic_record': "
            f"'<topic>-<fully-qualified name>'), got {value!r}"
        )
    return str(value)


def subject_name(strategy: str, topic: str, record_name: str | None, *, key: bool = False) -> str:
    """The subject ``strategy`` gives the values (``key=True``: the keys) of ``topic``
    whose record type is named ``record_name`` (its fully-qualified name; None when the
    schema names no type). Raises :class:`ConfigurationError` when the strategy needs a
    name the schema does not give."""
    if strategy == "topic":
        return f"{topic}-{'key' if key else 'value'}"
    if strategy not in STRATEGIES:
        raise ConfigurationError(f"unknown subject strategy {strategy!r} (one of {STRATEGIES})")
    if not record_name:
        raise ConfigurationError(
            f"subject_strategy={strategy!r} names the subject after the record type, but "
            "the schema names none (an Avro schema that is not a named record, enum or "
            "fixed; a JSON Schema without a 'title'): name the type in the schema, or use "
            "subject_strategy='topic'"
        )
    return record_name if strategy == "record" else f"{topic}-{record_name}"
