"""What users ask of a run: the Calculator and its results, step statistics, elastic
and program goodput, diagnostics, run groups and the insights (hangs, checkpoint
advice, host outliers)."""
