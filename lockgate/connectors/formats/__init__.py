"""Record formats shared by the connectors: ``flat_json`` (flat JSON objects straight from
bytes into Arrow columns, compiled), ``json_columns`` (Arrow columns to JSON text, a
column at a time), ``json_values`` (``json.dumps``'s ``default`` for dates, decimals,
bytes and sets). A connector package imports these, never another connector's."""
