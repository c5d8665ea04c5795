"""The lookup join (``DataStream.lookup_join``): ``operator`` joins each batch against a
bounded table held as a hash index (``index``) and builds the output rows (``output``);
the table is read through a :class:`~lockgate.connectors.lookup_source.LookupSource`."""
