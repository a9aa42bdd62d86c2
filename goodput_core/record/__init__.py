"""Recording a run on the training job's side: the recorder, its process-wide hooks,
the typed record_* methods, the background writer and the hang watchdog.

Imports nothing downstream (timeline, queries, monitor, exporters, cli)."""
