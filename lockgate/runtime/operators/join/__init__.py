"""The join operators: ``interval_join`` (IntervalJoinOperator: each key's records of
both sides kept until the other side's watermark passes their bounds) and
``window_join`` (the contents of a window operator that joins or co-groups two tagged
inputs per window, :mod:`..window`)."""
