"""Example pipelines on the `tributary` data source; run each with `python -m pipeline.examples.NAME`."""
