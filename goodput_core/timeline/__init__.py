"""Events -> attributed spans: event tables (ingest, table, payload_columns), interval
arithmetic, attempts and segments, badput buckets and the timeline itself (spans)."""
